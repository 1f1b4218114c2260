#include "baton/comm/testing/collective_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace baton {

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Integers up to 2^bits are exact in the type (bf16 keeps 8 significant
// bits, f16 11, f32 24).
int ExactBits(DataType t) {
  switch (t) {
    case DataType::kBF16:
      return 8;
    case DataType::kF16:
      return 11;
    case DataType::kF32:
      return 24;
    case DataType::kI32:
      return 30;
  }
  return 8;
}

int CeilLog2(int n) {
  int b = 0;
  while ((1ll << b) < n) ++b;
  return b;
}

}  // namespace

double InputValue(const CheckCase& c, int rank, size_t i) {
  const uint64_t h = Mix(Mix(Mix(static_cast<uint64_t>(c.seed)) ^
                             static_cast<uint64_t>(rank)) ^
                         static_cast<uint64_t>(i));
  const int exact = ExactBits(c.type);
  const bool reduces = c.kind == CollectiveKind::kReduceScatter ||
                       c.kind == CollectiveKind::kAllReduce;
  if (!reduces) return static_cast<double>(h & ((1u << std::min(exact, 16)) - 1));
  const int n = std::max(c.nranks, 1);
  const int k = exact - CeilLog2(n);
  if (k >= 1) {
    // n values below 2^k sum to less than 2^exact.
    return static_cast<double>(h & ((1u << std::min(k, 16)) - 1));
  }
  // More ranks than exact integers (bf16 past 128 ranks): each index gets 0
  // or 1 from at most 2^(exact-1) ranks, the others give 0.
  const int group = (n + (1 << (exact - 1)) - 1) >> (exact - 1);
  if ((static_cast<uint64_t>(rank) + i) % group != 0) return 0;
  return static_cast<double>(h & 1);
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
  if (c.op == ReduceOp::kMax) {
    double hi = InputValue(c, 0, i);
    for (int q = 1; q < c.nranks; ++q) hi = std::max(hi, InputValue(c, q, i));
    return hi;
  }
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

static_assert(sizeof(size_t) == 8, "wrong counts are 64-bit");

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
    case CollectiveKind::kSend:  // the ring exchange: the previous rank's
      for (size_t i = 0; i < c.count; ++i) {
        check(i, InputValue(c, (rank + c.nranks - 1) % c.nranks, i));
      }
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kRecv:
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
    case CollectiveKind::kSend: {
      // The ring exchange: send to the next rank, receive from the previous
      // one, in one group.
      const int r = comm.rank(), n = comm.size();
      if (n == 1) {
        return absl::InvalidArgumentError(
            "the send/recv ring needs at least 2 ranks (no self-sends)");
      }
      const P2POp ops[] = {
          P2POp::Send(send, c.count, c.type, (r + 1) % n),
          P2POp::Recv(recv, c.count, c.type, (r + n - 1) % n)};
      return comm.SendRecvGroup(ops, stream, options);
    }
    case CollectiveKind::kRecv:
      break;
  }
  return absl::InvalidArgumentError("bad collective kind");
}

void PlaceBuffers(const CheckCase& c, int rank, bool in_place, char* a,
                  char* b, const void** send, void** recv) {
  const size_t chunk = c.count * DataTypeSize(c.type);
  char* s = a;
  char* r = b;
  if (in_place) {
    r = a;
    if (c.kind == CollectiveKind::kAllGather) s = r + rank * chunk;
    if (c.kind == CollectiveKind::kReduceScatter) r = s + rank * chunk;
  }
  *send = s;
  *recv = r;
}

StatusOr<size_t> CheckOnBuffers(Communicator& comm, Stream& stream,
                                const CheckCase& c, const void* send,
                                void* recv, const CollectiveOptions& options) {
  const int rank = comm.rank();
  const size_t sbytes = SendBytes(c.kind, c.nranks, c.count, c.type);
  const size_t rbytes = RecvBytes(c.kind, c.nranks, c.count, c.type);
  // One staging buffer: poison for the output first, then the input (in
  // place the two overlap, so this order leaves the input intact).
  std::vector<unsigned char> host(std::max<size_t>(1, std::max(sbytes, rbytes)),
                                  0xEE);
  if (rbytes > 0) {
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(recv, host.data(), rbytes));
  }
  FillInput(c, rank, host.data());
  if (sbytes > 0 && (c.kind != CollectiveKind::kBroadcast || rank == c.root)) {
    BATON_RETURN_IF_ERROR(
        stream.MemcpyAsync(const_cast<void*>(send), host.data(), sbytes));
  }
  BATON_RETURN_IF_ERROR(IssueCollective(comm, stream, c, send, recv, options));
  if (rbytes > 0) {
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(host.data(), recv, rbytes));
  }
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  return CountWrong(c, rank, host.data());
}

StatusOr<size_t> RunChecked(Communicator& comm, Device& device, Stream& stream,
                            const CheckCase& c, bool in_place,
                            const CollectiveOptions& options) {
  const size_t bytes = std::max<size_t>(
      256, std::max(SendBytes(c.kind, c.nranks, c.count, c.type),
                    RecvBytes(c.kind, c.nranks, c.count, c.type)));
  BATON_ASSIGN_OR_RETURN(DeviceBuffer a, device.Allocate(bytes));
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device.Allocate(bytes));
  const void* send;
  void* recv;
  PlaceBuffers(c, comm.rank(), in_place, static_cast<char*>(a.data()),
               static_cast<char*>(b.data()), &send, &recv);
  return CheckOnBuffers(comm, stream, c, send, recv, options);
}

}  // namespace baton
