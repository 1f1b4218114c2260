// AdamW through the executor's optimizer hook (StepCallbacks::optimizer):
// the fused AdamW step of ops/adamw.h on the optimizer's stream, on either
// kind of device, and under offload (Policy::offload; OptimizerContext::
// on_host) the host AdamW of ops/host_adamw.h (threads + AVX2, the cast
// fused, bit-identical to AdamWStep's CPU loop) as host work on the host
// stream. With StepCallbacks::optimizer_writes_shard the step also writes
// the updated master, rounded, into the next all-gather's input
// (OptimizerContext::shard).
//
// The host steps of every executor in the process share one pool of the
// machine's threads (inproc ranks share its cores); their calls take the
// pool one after another (its workers never wait for other host work, so
// this keeps runtime/device.h's rule 7).
//
// Under Policy::optimizer = adamw8bit (OptimizerContext::moment1_codes set)
// the step is ops/adamw8bit.h's, on the device or, under offload, as host
// work on the host stream (one thread), with the same fused cast.
//
// Thread-safe: the hook holds only its configuration.
#ifndef BATON_OPTIM_ADAMW_HOOK_H_
#define BATON_OPTIM_ADAMW_HOOK_H_

#include <functional>

#include "baton/ops/adamw.h"
#include "baton/ops/adamw8bit.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"

namespace baton::optim {

// The arguments of one AdamW step over an optimizer context's shard
// (ctx.step + 1 for the bias correction).
ops::AdamWArgs AdamWArgsFor(const scheduler::OptimizerContext& ctx);

// The arguments of one 8-bit AdamW step over a context's shard.
ops::AdamW8bitArgs AdamW8bitArgsFor(const scheduler::OptimizerContext& ctx);

// One optimizer step of `ctx` with `config`, on its stream (host work on
// the shared host pool when ctx.on_host).
Status AdamWOptimizerStep(const ops::AdamWConfig& config,
                          const scheduler::OptimizerContext& ctx);

// A StepCallbacks::optimizer running AdamWOptimizerStep with `config`.
std::function<Status(const scheduler::OptimizerContext&)> AdamWHook(
    const ops::AdamWConfig& config);

}  // namespace baton::optim

#endif  // BATON_OPTIM_ADAMW_HOOK_H_
