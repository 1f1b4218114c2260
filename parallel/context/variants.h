// The two variants of context_attention.h, made by ContextAttention::Create
// after it has checked the arguments (internal to parallel/context/).
#ifndef BATON_PARALLEL_CONTEXT_VARIANTS_H_
#define BATON_PARALLEL_CONTEXT_VARIANTS_H_

#include <memory>

#include "baton/comm/communicator.h"
#include "baton/ops/attention.h"
#include "baton/parallel/context/context_attention.h"
#include "baton/parallel/context/split.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::context::internal {

// ring_attention.cc
StatusOr<std::unique_ptr<ContextAttention>> NewRingAttention(
    Communicator& group, Device& device, const ops::AttentionShape& local,
    const ContextSplit& split, const ContextAttentionOptions& options);

// allgather_attention.cc
StatusOr<std::unique_ptr<ContextAttention>> NewAllGatherAttention(
    Communicator& group, Device& device, const ops::AttentionShape& local,
    const ContextSplit& split, const ContextAttentionOptions& options);

}  // namespace baton::context::internal

#endif  // BATON_PARALLEL_CONTEXT_VARIANTS_H_
