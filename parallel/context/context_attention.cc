#include "baton/parallel/context/context_attention.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/parallel/context/variants.h"

namespace baton::context {
namespace {

Status CheckLocalShape(const ops::AttentionShape& s) {
  const std::pair<const char*, int64_t> sizes[] = {{"batch", s.batch},
                                                   {"seq", s.seq},
                                                   {"heads", s.heads},
                                                   {"kv_heads", s.kv_heads},
                                                   {"head_dim", s.head_dim}};
  for (const auto& [name, v] : sizes) {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("context attention: ", name, " must be positive, got ", v));
    }
  }
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context attention: kv_heads ", s.kv_heads, " does not divide heads ", s.heads));
  }
  if (s.dtype != DataType::kF32 && s.dtype != DataType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context attention: dtype must be float or bfloat16, got ", DataTypeName(s.dtype)));
  }
  if (s.seq % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context attention: the local seq ", s.seq, " is not two equal chunks"));
  }
  return absl::OkStatus();
}

// What the variant asks of the group's backend for memory of `kind`.
Status CheckCaps(const Communicator& group, ContextAttentionKind kind, DeviceKind memory) {
  if (group.size() == 1) return absl::OkStatus();  // no transfers
  const CommCaps caps = group.caps();
  const bool host = memory == DeviceKind::kHost;
  const bool ok = kind == ContextAttentionKind::kRing
                      ? (host ? caps.p2p_host_memory : caps.p2p_device_memory)
                      : (host ? caps.host_memory : caps.device_memory);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "context attention (", ContextAttentionKindName(kind), "): the ", group.backend(),
      " backend cannot move ", host ? "host" : "device", " memory",
      kind == ContextAttentionKind::kRing ? " point to point" : ""));
}

}  // namespace

const char* ContextAttentionKindName(ContextAttentionKind kind) {
  return kind == ContextAttentionKind::kRing ? "ring" : "allgather";
}

const char* ContextWorkName(ContextWork what) {
  switch (what) {
    case ContextWork::kKvTransfer:
      return "kv transfer";
    case ContextWork::kDkvTransfer:
      return "dkv transfer";
    case ContextWork::kAllGather:
      return "all-gather";
    case ContextWork::kReduceScatter:
      return "reduce-scatter";
    case ContextWork::kForwardBlocks:
      return "attention blocks";
    case ContextWork::kBackwardBlocks:
      return "attention blocks backward";
  }
  return "?";
}

StatusOr<ContextAttentionKind> ParseContextAttentionKind(absl::string_view name) {
  if (name == "ring") return ContextAttentionKind::kRing;
  if (name == "allgather") return ContextAttentionKind::kAllGather;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown context attention '", name, "' (ring or allgather)"));
}

StatusOr<std::unique_ptr<ContextAttention>> ContextAttention::Create(
    Communicator& group, Device& device, const ops::AttentionShape& local,
    const ContextAttentionOptions& options) {
  BATON_RETURN_IF_ERROR(CheckLocalShape(local));
  BATON_RETURN_IF_ERROR(CheckCaps(group, options.kind, device.kind()));
  if (options.tag > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("context attention: tag ", options.tag, " is over 255"));
  }
  BATON_ASSIGN_OR_RETURN(ContextSplit split,
                         ContextSplit::Create(local.seq * group.size(), group.size()));
  return options.kind == ContextAttentionKind::kRing
             ? internal::NewRingAttention(group, device, local, split, options)
             : internal::NewAllGatherAttention(group, device, local, split, options);
}

ContextAttention::ContextAttention(Communicator& group, Device& device,
                                   const ops::AttentionShape& local, const ContextSplit& split,
                                   const ContextAttentionOptions& options)
    : group_(group),
      device_(device),
      local_(local),
      split_(split),
      options_(options),
      rank_(group.rank()),
      q_elems_(local.batch * local.seq * local.heads * local.head_dim),
      kv_elems_(local.batch * local.seq * local.kv_heads * local.head_dim),
      lse_elems_(local.batch * local.heads * local.seq) {}

Status ContextAttention::InitBase() {
  BATON_ASSIGN_OR_RETURN(entry_, device_.CreateEvent());
  BATON_ASSIGN_OR_RETURN(exit_, device_.CreateEvent());
  return absl::OkStatus();
}

StatusOr<DeviceBuffer> ContextAttention::Allocate(size_t bytes) {
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(bytes));
  workspace_bytes_ += bytes;
  return b;
}

CollectiveOptions ContextAttention::TransferOptions() const {
  CollectiveOptions o;
  o.tag = options_.tag;
  o.timeout = options_.timeout;
  o.position = options_.position;
  return o;
}

Status ContextAttention::Observe(ContextWork what, int step, Stream& stream,
                                 const std::function<Status()>& issue) const {
  if (options_.observer == nullptr) return issue();
  return options_.observer->Around(what, step, stream, issue);
}

ops::AttentionBlockShape ContextAttention::LocalBlockBase() const {
  ops::AttentionBlockShape s;
  s.batch = local_.batch;
  s.heads = local_.heads;
  s.kv_heads = local_.kv_heads;
  s.head_dim = local_.head_dim;
  s.dtype = local_.dtype;
  s.q_seq = local_.seq;
  s.kv_seq = local_.seq;
  return s;
}

Status ContextAttention::CheckStreams(Stream& compute, Stream& comm) const {
  if (compute.kind() != device_.kind() || comm.kind() != device_.kind()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context attention: the streams must be ", DeviceKindName(device_.kind()),
        " streams of the object's device"));
  }
  return absl::OkStatus();
}

Status ContextAttention::Begin(Stream& compute, Stream& comm) {
  BATON_RETURN_IF_ERROR(compute.Wait(*exit_));
  BATON_RETURN_IF_ERROR(comm.Wait(*exit_));
  BATON_RETURN_IF_ERROR(entry_->Record(compute));
  return comm.Wait(*entry_);
}

Status ContextAttention::Forward(Stream& compute, Stream& comm, const void* q, const void* k,
                                 const void* v, void* out, float* lse) {
  BATON_RETURN_IF_ERROR(CheckStreams(compute, comm));
  for (const auto& [name, p] : {std::pair<const char*, const void*>{"q", q},
                                {"k", k}, {"v", v}, {"out", out}, {"lse", lse}}) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("context attention forward: ", name,
                                                     " is null"));
    }
  }
  BATON_RETURN_IF_ERROR(Begin(compute, comm));
  BATON_RETURN_IF_ERROR(DoForward(compute, comm, q, k, v, out, lse));
  return exit_->Record(compute);
}

Status ContextAttention::Backward(Stream& compute, Stream& comm, const void* dout,
                                  const void* q, const void* k, const void* v, const void* out,
                                  const float* lse, void* dq, void* dk, void* dv) {
  BATON_RETURN_IF_ERROR(CheckStreams(compute, comm));
  for (const auto& [name, p] : {std::pair<const char*, const void*>{"dout", dout},
                                {"q", q}, {"k", k}, {"v", v}, {"out", out}, {"lse", lse},
                                {"dq", dq}, {"dk", dk}, {"dv", dv}}) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("context attention backward: ", name,
                                                     " is null"));
    }
  }
  BATON_RETURN_IF_ERROR(Begin(compute, comm));
  BATON_RETURN_IF_ERROR(DoBackward(compute, comm, dout, q, k, v, out, lse, dq, dk, dv));
  return exit_->Record(compute);
}

}  // namespace baton::context
