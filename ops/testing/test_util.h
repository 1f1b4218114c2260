// Test support for the ops: float64 data, packing into f32 / bf16, the
// devices to run on (host always, CUDA when present), upload / download,
// poisoned outputs, and one closeness rule.
#ifndef BATON_OPS_TESTING_TEST_UTIL_H_
#define BATON_OPS_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"

namespace baton::ops::testing {

// n standard-normal values (scaled by `scale`), seeded.
std::vector<double> Random(int64_t n, uint64_t seed, double scale = 1.0);

// Bytes of `v` in dtype t (rounded for bf16), and back.
std::vector<uint8_t> Pack(const std::vector<double>& v, DataType t);
std::vector<double> Unpack(const std::vector<uint8_t>& b, DataType t);
// The bytes of int32 token ids (for Upload).
std::vector<uint8_t> IdBytes(const std::vector<int32_t>& ids);
// `v` as stored in dtype t (rounded through it).
std::vector<double> Round(const std::vector<double>& v, DataType t);

// The host device, and CUDA device 0 when there is one.
std::vector<std::unique_ptr<Device>> TestDevices();

// A device buffer holding `bytes` (waits, so `bytes` may be a temporary).
DeviceBuffer Upload(Device& d, Stream& s, const std::vector<uint8_t>& bytes);
// A device buffer of `bytes` bytes all 0xFF: NaN in f32 and bf16, so an
// element the op fails to write fails the comparison.
DeviceBuffer Poisoned(Device& d, Stream& s, size_t bytes);
std::vector<uint8_t> Download(Stream& s, const DeviceBuffer& b, size_t bytes);
// Download + Unpack.
std::vector<double> Fetch(Stream& s, const DeviceBuffer& b, int64_t n,
                          DataType t);

// Device memory starting `shift` bytes past a guard band: a pointer that
// is not 16-byte aligned when shift is not a multiple of 16, so the CUDA
// kernels' scalar fallbacks (ops/cuda_util.cuh) run on it. The allocation
// is [kGuardBytes guard][shift bytes][payload][kGuardBytes guard], the
// guards and the shift filled with kGuardByte; Fetch checks that they are
// intact and fails the running test (naming the side and the first byte
// changed) when an op wrote outside its buffer.
class Shifted {
 public:
  static constexpr size_t kGuardBytes = 64;  // a multiple of 16: the guard
                                             // does not change alignment
  static constexpr uint8_t kGuardByte = 0xA5;
  Shifted(DeviceBuffer b, size_t shift, size_t bytes)
      : buffer_(std::move(b)), shift_(shift), bytes_(bytes) {}
  void* data() const {
    return static_cast<char*>(buffer_.data()) + kGuardBytes + shift_;
  }
  // "" when the guard bands and the shift bytes still hold kGuardByte;
  // else which byte, before or after the payload, was overwritten.
  std::string CheckGuards(Stream& s) const;

 private:
  DeviceBuffer buffer_;
  size_t shift_;
  size_t bytes_;
};
// Upload / Poisoned / Fetch at `shift` bytes. Fetch also checks the guards
// (CheckGuards) and adds a test failure when they are not intact.
Shifted Upload(Device& d, Stream& s, const std::vector<uint8_t>& bytes,
               size_t shift);
Shifted Poisoned(Device& d, Stream& s, size_t bytes, size_t shift);
std::vector<double> Fetch(Stream& s, const Shifted& b, int64_t n, DataType t);

// Root mean square of `v`.
double Rms(const std::vector<double>& v);

// "" when every got[i] is finite and within tol * (|want[i]| + scale) of
// want[i], where scale = Rms(want) covers terms that cancel; else a
// description of the first element that is not.
std::string Compare(const std::string& what, const std::vector<double>& got,
                    const std::vector<double>& want, double tol);

// Central-difference gradient of f at x (float64), step h.
std::vector<double> FiniteDifference(
    const std::function<double(const std::vector<double>&)>& f,
    std::vector<double> x, double h = 1e-6);

// Tolerance of a dtype: fp32 about 1e-5 relative, bf16 about 1e-2.
inline double Tolerance(DataType t) { return t == DataType::kF32 ? 1e-5 : 1e-2; }

}  // namespace baton::ops::testing

#endif  // BATON_OPS_TESTING_TEST_UTIL_H_
