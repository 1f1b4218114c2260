#include "baton/comm/inproc/move.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/comm/reduce.h"
#if defined(BATON_HAVE_CUDA)
#include "baton/comm/inproc/reduce_kernel.h"
#endif

namespace baton::inproc_internal {

void MoveShare(const CollectiveHeader& h, const std::vector<RankBuffers>& a,
               int rank) {
  const int n = static_cast<int>(a.size());
  const auto type = static_cast<DataType>(h.type);
  const size_t esize = DataTypeSize(type);
  const size_t chunk = h.count * esize;
  const int divisor = static_cast<ReduceOp>(h.op) == ReduceOp::kAvg ? n : 1;
  const bool acc = h.accumulate_fp32 != 0;
  const bool max = static_cast<ReduceOp>(h.op) == ReduceOp::kMax;
  std::vector<const void*> srcs(n);
  auto reduce = [&](void* out, size_t count) {
    if (max) {
      MaxSources(out, srcs.data(), n, count, type);
    } else {
      ReduceSources(out, srcs.data(), n, count, type, acc, divisor);
    }
  };
  switch (static_cast<CollectiveKind>(h.kind)) {
    case CollectiveKind::kAllGather:
      for (int q = 0; q < n; ++q) {
        char* dst = static_cast<char*>(a[rank].recv) + q * chunk;
        if (chunk != 0 && dst != a[q].send) CopyBytes(dst, a[q].send, chunk);
      }
      return;
    case CollectiveKind::kReduceScatter:
      for (int q = 0; q < n; ++q) {
        srcs[q] = static_cast<const char*>(a[q].send) + rank * chunk;
      }
      reduce(a[rank].recv, h.count);
      return;
    case CollectiveKind::kAllReduce: {
      const size_t begin = h.count * rank / n;
      const size_t end = h.count * (rank + 1) / n;
      if (begin == end) return;
      for (int q = 0; q < n; ++q) {
        srcs[q] = static_cast<const char*>(a[q].send) + begin * esize;
      }
      char* mine = static_cast<char*>(a[rank].recv) + begin * esize;
      reduce(mine, end - begin);
      for (int q = 0; q < n; ++q) {
        if (q == rank) continue;
        CopyBytes(static_cast<char*>(a[q].recv) + begin * esize, mine,
                  (end - begin) * esize);
      }
      return;
    }
    case CollectiveKind::kBroadcast: {
      const void* src = a[h.root].send;
      if (chunk != 0 && a[rank].recv != src) CopyBytes(a[rank].recv, src, chunk);
      return;
    }
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSend:  // point-to-point moves in p2p.cc
    case CollectiveKind::kRecv:
      return;
  }
}

namespace {

#if defined(BATON_HAVE_CUDA)
Status KernelResult(int err, const char* what) {
  if (err == 0) return Status();
  return absl::InternalError(absl::StrCat(
      "inproc: ", what, " kernel launch failed (cudaError ", err, ")"));
}

// Copies in launches of at most kMaxCopies.
Status LaunchAllCopies(const std::vector<void*>& dst,
                       const std::vector<const void*>& src,
                       const std::vector<size_t>& bytes, Stream& stream) {
  for (size_t k = 0; k < dst.size(); k += kMaxCopies) {
    const int m = static_cast<int>(std::min<size_t>(kMaxCopies, dst.size() - k));
    BATON_RETURN_IF_ERROR(KernelResult(
        LaunchCopies(dst.data() + k, src.data() + k, bytes.data() + k, m,
                     stream.native_handle()),
        "copy"));
  }
  return Status();
}
#endif

Status EnqueueOnCuda(const CollectiveHeader& h,
                     const std::vector<RankBuffers>& a, Stream& stream) {
#if defined(BATON_HAVE_CUDA)
  const int n = static_cast<int>(a.size());
  const auto type = static_cast<DataType>(h.type);
  const size_t chunk = h.count * DataTypeSize(type);
  const int divisor = static_cast<ReduceOp>(h.op) == ReduceOp::kAvg ? n : 1;
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> bytes;
  auto copy = [&](void* d, const void* s) {
    if (chunk != 0 && d != s) {
      dst.push_back(d);
      src.push_back(s);
      bytes.push_back(chunk);
    }
  };
  std::vector<const void*> srcs(n);
  std::vector<void*> outs(n);
  for (int q = 0; q < n; ++q) {
    srcs[q] = a[q].send;
    outs[q] = a[q].recv;
  }
  switch (static_cast<CollectiveKind>(h.kind)) {
    case CollectiveKind::kAllGather:
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) {
          copy(static_cast<char*>(a[r].recv) + q * chunk, a[q].send);
        }
      }
      return LaunchAllCopies(dst, src, bytes, stream);
    case CollectiveKind::kBroadcast:
      for (int r = 0; r < n; ++r) copy(a[r].recv, a[h.root].send);
      return LaunchAllCopies(dst, src, bytes, stream);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce: {
      if (n > kMaxReduceSources) {
        return absl::UnimplementedError(absl::StrCat(
            "inproc on a GPU reduces at most ", kMaxReduceSources, " ranks"));
      }
      const bool rs = static_cast<CollectiveKind>(h.kind) ==
                      CollectiveKind::kReduceScatter;
      return KernelResult(
          LaunchReduce(outs.data(), n, srcs.data(), n, h.count, rs ? n : 1,
                       rs ? 0 : 1, static_cast<int>(type), divisor,
                       static_cast<ReduceOp>(h.op) == ReduceOp::kMax ? 1 : 0,
                       stream.native_handle()),
          "reduction");
    }
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSend:  // point-to-point moves in p2p.cc
    case CollectiveKind::kRecv:
      return Status();
  }
  return Status();
#else
  (void)h;
  (void)a;
  (void)stream;
  return absl::UnimplementedError("inproc: built without CUDA");
#endif
}

}  // namespace

Status EnqueueMoveAll(const CollectiveHeader& h, std::vector<RankBuffers> a,
                      Stream& stream) {
  if (stream.kind() == DeviceKind::kHost) {
    if (static_cast<CollectiveKind>(h.kind) == CollectiveKind::kBarrier) {
      return Status();
    }
    return stream.Enqueue([h, a = std::move(a)]() {
      for (int r = 0; r < static_cast<int>(a.size()); ++r) MoveShare(h, a, r);
      return Status();
    });
  }
  return EnqueueOnCuda(h, a, stream);
}

}  // namespace baton::inproc_internal
