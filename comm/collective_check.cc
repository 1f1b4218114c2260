#include "comm/collective_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace baton {

double InputValue(const CheckCase& c, int rank, size_t i) {
  // Small integers in [-5, 5]; sums of up to 25 ranks stay exact in bf16.
  const long v = static_cast<long>((rank * 7 + i * 3 + c.seed * 5) % 11) - 5;
  return static_cast<double>(v);
}

void FillInput(const CheckCase& c, int rank, void* send) {
  const size_t n = c.kind == CollectiveKind::kReduceScatter
                       ? c.count * c.nranks
                       : c.count;
  if (c.kind == CollectiveKind::kBroadcast && rank != c.root) return;
  for (size_t i = 0; i < n; ++i) {
    StoreFromDouble(send, c.type, i, InputValue(c, rank, i));
  }
}

namespace {

// Expected value at index i of the (full-length) reduced vector.
double Reduced(const CheckCase& c, size_t i) {
  double sum = 0;
  for (int q = 0; q < c.nranks; ++q) sum += InputValue(c, q, i);
  if (c.op == ReduceOp::kSum) return sum;
  if (c.type == DataType::kI32) {
    return static_cast<double>(static_cast<long>(sum) / c.nranks);
  }
  return static_cast<double>(static_cast<float>(sum) /
                             static_cast<float>(c.nranks));
}

bool Same(const CheckCase& c, double got, double want) {
  if (c.op == ReduceOp::kAvg && c.type != DataType::kI32) {
    const double tol = c.type == DataType::kF32 ? 1e-6 : 1e-2;
    return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
  }
  return got == want;
}

}  // namespace

size_t CountWrong(const CheckCase& c, int rank, const void* recv) {
  size_t wrong = 0;
  auto check = [&](size_t i, double want) {
    // Round the expectation to the type first (exact for these inputs).
    double stored = 0;
    StoreFromDouble(&stored, c.type, 0, want);
    const double rounded = LoadAsDouble(&stored, c.type, 0);
    if (!Same(c, LoadAsDouble(recv, c.type, i), rounded)) ++wrong;
  };
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      for (int q = 0; q < c.nranks; ++q) {
        for (size_t i = 0; i < c.count; ++i) {
          check(q * c.count + i, InputValue(c, q, i));
        }
      }
      break;
    case CollectiveKind::kReduceScatter:
      for (size_t i = 0; i < c.count; ++i) {
        check(i, Reduced(c, rank * c.count + i));
      }
      break;
    case CollectiveKind::kAllReduce:
      for (size_t i = 0; i < c.count; ++i) check(i, Reduced(c, i));
      break;
    case CollectiveKind::kBroadcast:
      for (size_t i = 0; i < c.count; ++i) check(i, InputValue(c, c.root, i));
      break;
    case CollectiveKind::kBarrier:
      break;
  }
  return wrong;
}

Status IssueCollective(Communicator& comm, Stream& stream, const CheckCase& c,
                       const void* send, void* recv,
                       const CollectiveOptions& options) {
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      return comm.AllGather(send, recv, c.count, c.type, stream, options);
    case CollectiveKind::kReduceScatter:
      return comm.ReduceScatter(send, recv, c.count, c.type, c.op, stream,
                                options);
    case CollectiveKind::kAllReduce:
      return comm.AllReduce(send, recv, c.count, c.type, c.op, stream,
                            options);
    case CollectiveKind::kBroadcast:
      return comm.Broadcast(send, recv, c.count, c.type, c.root, stream,
                            options);
    case CollectiveKind::kBarrier:
      return comm.Barrier(stream, options);
  }
  return absl::InvalidArgumentError("bad collective kind");
}

StatusOr<size_t> RunHostChecked(Communicator& comm, Stream& stream,
                                const CheckCase& c, bool in_place,
                                const CollectiveOptions& options) {
  constexpr unsigned char kPoison = 0xEE;
  const int rank = comm.rank();
  const size_t chunk = c.count * DataTypeSize(c.type);
  const size_t sbytes = SendBytes(c.kind, c.nranks, c.count, c.type);
  const size_t rbytes = RecvBytes(c.kind, c.nranks, c.count, c.type);
  std::vector<unsigned char> a(std::max<size_t>(1, std::max(sbytes, rbytes)),
                               kPoison);
  std::vector<unsigned char> b(std::max<size_t>(1, rbytes), kPoison);
  void* send = a.data();
  void* recv = b.data();
  if (in_place) {
    recv = a.data();
    if (c.kind == CollectiveKind::kAllGather) send = a.data() + rank * chunk;
    if (c.kind == CollectiveKind::kReduceScatter) recv = a.data() + rank * chunk;
  }
  FillInput(c, rank, send);
  BATON_RETURN_IF_ERROR(IssueCollective(comm, stream, c, send, recv, options));
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  return CountWrong(c, rank, recv);
}

StatusOr<size_t> RunDeviceChecked(Communicator& comm, Device& device,
                                  Stream& stream, const CheckCase& c,
                                  bool in_place,
                                  const CollectiveOptions& options) {
  constexpr unsigned char kPoison = 0xEE;
  const int rank = comm.rank();
  const size_t chunk = c.count * DataTypeSize(c.type);
  const size_t sbytes = SendBytes(c.kind, c.nranks, c.count, c.type);
  const size_t rbytes = RecvBytes(c.kind, c.nranks, c.count, c.type);
  const size_t abytes = std::max<size_t>(256, std::max(sbytes, rbytes));
  BATON_ASSIGN_OR_RETURN(DeviceBuffer a, device.Allocate(abytes));
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device.Allocate(abytes));
  char* send = static_cast<char*>(a.data());
  char* recv = static_cast<char*>(b.data());
  if (in_place) {
    recv = send;
    if (c.kind == CollectiveKind::kAllGather) send = recv + rank * chunk;
    if (c.kind == CollectiveKind::kReduceScatter) recv = send + rank * chunk;
  }
  std::vector<unsigned char> host(abytes, kPoison);
  BATON_RETURN_IF_ERROR(stream.MemcpyAsync(a.data(), host.data(), abytes));
  BATON_RETURN_IF_ERROR(stream.MemcpyAsync(b.data(), host.data(), abytes));
  std::vector<unsigned char> input(std::max<size_t>(1, sbytes), kPoison);
  FillInput(c, rank, input.data());
  if (sbytes > 0 && (c.kind != CollectiveKind::kBroadcast || rank == c.root)) {
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(send, input.data(), sbytes));
  }
  BATON_RETURN_IF_ERROR(IssueCollective(comm, stream, c, send, recv, options));
  std::vector<unsigned char> out(std::max<size_t>(1, rbytes));
  if (rbytes > 0) {
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(out.data(), recv, rbytes));
  }
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  return CountWrong(c, rank, out.data());
}

}  // namespace baton
