#include "baton/comm/communicator.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace baton {

const char* CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kSend:
      return "send";
    case CollectiveKind::kRecv:
      return "recv";
  }
  return "?";
}

StatusOr<CollectiveKind> ParseCollective(absl::string_view name) {
  for (CollectiveKind k :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
        CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
        CollectiveKind::kBarrier}) {
    if (name == CollectiveName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective '", name,
      "' (all_gather, reduce_scatter, all_reduce, broadcast, barrier)"));
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int colour,
                                                           int key) {
  (void)colour;
  (void)key;
  return absl::UnimplementedError(
      absl::StrCat(backend(), ": Split is not implemented"));
}

Status Communicator::SendRecvGroup(absl::Span<const P2POp> ops,
                                   Stream& stream,
                                   const CollectiveOptions& options) {
  (void)ops;
  (void)stream;
  (void)options;
  return absl::UnimplementedError(
      absl::StrCat(backend(), ": point-to-point is not implemented"));
}

Status ValidateP2P(const char* backend, int rank, int size,
                   absl::Span<const P2POp> ops,
                   const CollectiveOptions& options) {
  if (options.tag > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " send/recv: tag ", options.tag, " is out of range 0..255"));
  }
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " send/recv: negative timeout"));
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " send/recv: empty group"));
  }
  if (ops.size() > Communicator::kMaxGroupOps) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " send/recv: group of ", ops.size(), " ops (at most ",
        Communicator::kMaxGroupOps, ")"));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const bool is_send = op.kind == P2POp::Kind::kSend;
    const std::string what = absl::StrCat(
        backend, " ", is_send ? "send" : "recv", " (op ", i, " of the group) ",
        is_send ? "to" : "from", " rank ", op.peer, " on rank ", rank);
    if (op.kind != P2POp::Kind::kSend && op.kind != P2POp::Kind::kRecv) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": bad op kind"));
    }
    if (op.peer < 0 || op.peer >= size) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": peer is out of range 0..", size - 1));
    }
    if (op.peer == rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": sending to oneself is not supported (copy locally)"));
    }
    if (DataTypeSize(op.type) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": bad data type"));
    }
    if (op.count > std::numeric_limits<size_t>::max() / 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": count ", op.count, " overflows a byte size"));
    }
    const void* buf = is_send ? op.send : op.recv;
    if (op.count > 0 && buf == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": buffer is null with count ", op.count));
    }
  }
  return Status();
}

size_t SendBytes(CollectiveKind kind, int size, size_t count, DataType type) {
  const size_t b = count * DataTypeSize(type);
  return kind == CollectiveKind::kReduceScatter ? b * size
         : kind == CollectiveKind::kBarrier     ? 0
                                                : b;
}

size_t RecvBytes(CollectiveKind kind, int size, size_t count, DataType type) {
  const size_t b = count * DataTypeSize(type);
  return kind == CollectiveKind::kAllGather ? b * size
         : kind == CollectiveKind::kBarrier ? 0
                                            : b;
}

namespace {
bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  if (an == 0 || bn == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bn && pb < pa + an;
}
}  // namespace

Status ValidateCollective(CollectiveKind kind, int rank, int size,
                          const void* send, const void* recv, size_t count,
                          DataType type, int root,
                          const CollectiveOptions& options) {
  const char* name = CollectiveName(kind);
  if (options.tag > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": tag ", options.tag, " is out of range 0..255"));
  }
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": negative timeout"));
  }
  if (kind == CollectiveKind::kBarrier) return Status();
  if (DataTypeSize(type) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad data type"));
  }
  const size_t limit = std::numeric_limits<size_t>::max() / 8 / size;
  if (count > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": count ", count, " overflows a byte size"));
  }
  if (kind == CollectiveKind::kBroadcast && (root < 0 || root >= size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": root ", root, " is out of range 0..", size - 1));
  }
  if (count == 0) return Status();
  const bool needs_send = kind != CollectiveKind::kBroadcast || rank == root;
  if (needs_send && send == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": send buffer is null with count ", count));
  }
  if (recv == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": recv buffer is null with count ", count));
  }
  if (!needs_send) return Status();
  const size_t sb = SendBytes(kind, size, count, type);
  const size_t rb = RecvBytes(kind, size, count, type);
  const size_t chunk = count * DataTypeSize(type);
  const char* s = static_cast<const char*>(send);
  const char* r = static_cast<const char*>(recv);
  bool in_place = false;
  switch (kind) {
    case CollectiveKind::kAllGather:
      in_place = s == r + rank * chunk;
      break;
    case CollectiveKind::kReduceScatter:
      in_place = r == s + rank * chunk;
      break;
    default:
      in_place = s == r;
      break;
  }
  if (!in_place && Overlap(send, sb, recv, rb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": send and recv buffers overlap but are not in place (in place "
              "means ",
        kind == CollectiveKind::kAllGather       ? "send == recv + rank*count"
        : kind == CollectiveKind::kReduceScatter ? "recv == send + rank*count"
                                                 : "send == recv",
        ")"));
  }
  return Status();
}

}  // namespace baton
