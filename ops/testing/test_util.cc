#include "baton/ops/testing/test_util.h"

#include <cmath>
#include <random>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace baton::ops::testing {

std::vector<double> Random(int64_t n, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (double& e : v) e = d(rng);
  return v;
}

std::vector<uint8_t> Pack(const std::vector<double>& v, DataType t) {
  std::vector<uint8_t> out(v.size() * DataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) StoreFromDouble(out.data(), t, i, v[i]);
  return out;
}

std::vector<double> Unpack(const std::vector<uint8_t>& b, DataType t) {
  std::vector<double> v(b.size() / DataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = LoadAsDouble(b.data(), t, i);
  return v;
}

std::vector<uint8_t> IdBytes(const std::vector<int32_t>& ids) {
  const auto* p = reinterpret_cast<const uint8_t*>(ids.data());
  return std::vector<uint8_t>(p, p + ids.size() * sizeof(int32_t));
}

std::vector<double> Round(const std::vector<double>& v, DataType t) {
  return Unpack(Pack(v, t), t);
}

std::vector<std::unique_ptr<Device>> TestDevices() {
  std::vector<std::unique_ptr<Device>> list;
  list.push_back(*CreateHostDevice());
  if (CudaDeviceCount() > 0) list.push_back(*CreateCudaDevice(0));
  return list;
}

DeviceBuffer Upload(Device& d, Stream& s, const std::vector<uint8_t>& bytes) {
  DeviceBuffer b = *d.Allocate(bytes.empty() ? 1 : bytes.size());
  if (!bytes.empty()) {
    (void)s.MemcpyAsync(b.data(), bytes.data(), bytes.size());
  }
  (void)s.Synchronize();
  return b;
}

DeviceBuffer Poisoned(Device& d, Stream& s, size_t bytes) {
  return Upload(d, s, std::vector<uint8_t>(bytes, 0xFF));
}

std::vector<uint8_t> Download(Stream& s, const DeviceBuffer& b, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  (void)s.MemcpyAsync(out.data(), b.data(), bytes);
  (void)s.Synchronize();
  return out;
}

std::vector<double> Fetch(Stream& s, const DeviceBuffer& b, int64_t n,
                          DataType t) {
  return Unpack(Download(s, b, n * DataTypeSize(t)), t);
}

Shifted Upload(Device& d, Stream& s, const std::vector<uint8_t>& bytes,
               size_t shift) {
  std::vector<uint8_t> padded(Shifted::kGuardBytes + shift, Shifted::kGuardByte);
  padded.insert(padded.end(), bytes.begin(), bytes.end());
  padded.insert(padded.end(), Shifted::kGuardBytes, Shifted::kGuardByte);
  return Shifted(Upload(d, s, padded), shift, bytes.size());
}

Shifted Poisoned(Device& d, Stream& s, size_t bytes, size_t shift) {
  return Upload(d, s, std::vector<uint8_t>(bytes, 0xFF), shift);
}

std::string Shifted::CheckGuards(Stream& s) const {
  const size_t head = kGuardBytes + shift_;
  const std::vector<uint8_t> all = Download(s, buffer_, head + bytes_ + kGuardBytes);
  for (size_t i = 0; i < head; ++i) {
    if (all[i] != kGuardByte) {
      return "write " + std::to_string(head - i) +
             " byte(s) before the start of the buffer";
    }
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (all[head + bytes_ + i] != kGuardByte) {
      return "write at byte " + std::to_string(i) + " past the end of the " +
             std::to_string(bytes_) + "-byte buffer";
    }
  }
  return "";
}

std::vector<double> Fetch(Stream& s, const Shifted& b, int64_t n, DataType t) {
  const std::string guards = b.CheckGuards(s);
  if (!guards.empty()) ADD_FAILURE() << guards;
  std::vector<uint8_t> out(n * DataTypeSize(t));
  (void)s.MemcpyAsync(out.data(), b.data(), out.size());
  (void)s.Synchronize();
  return Unpack(out, t);
}

double Rms(const std::vector<double>& v) {
  double sq = 0;
  for (double e : v) sq += e * e;
  return v.empty() ? 0 : std::sqrt(sq / v.size());
}

std::string Compare(const std::string& what, const std::vector<double>& got,
                    const std::vector<double>& want, double tol) {
  std::ostringstream out;
  if (got.size() != want.size()) {
    out << what << ": " << got.size() << " elements, want " << want.size();
    return out.str();
  }
  const double scale = Rms(want);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) ||
        std::abs(got[i] - want[i]) > tol * (std::abs(want[i]) + scale)) {
      out << what << "[" << i << "] = " << got[i] << ", want " << want[i]
          << " (tolerance " << tol << " x (|want| + rms " << scale << "))";
      return out.str();
    }
  }
  return "";
}

std::vector<double> FiniteDifference(
    const std::function<double(const std::vector<double>&)>& f,
    std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

}  // namespace baton::ops::testing
