#include "baton/optim/adamw_hook.h"

#include "baton/ops/host_adamw.h"
#include "baton/ops/host_pool.h"
#include "baton/scheduler/optimizer_state.h"

namespace baton::optim {

ops::AdamWArgs AdamWArgsFor(const scheduler::OptimizerContext& ctx) {
  ops::AdamWArgs a;
  a.n = ctx.shard_numel;
  a.step = ctx.step + 1;
  a.grad_scale = static_cast<float>(ctx.grad_scale);
  a.master = ctx.master;
  a.grad = ctx.grad;
  a.grad_dtype = ctx.grad_dtype;
  a.moment1 = ctx.moment1;
  a.moment2 = ctx.moment2;
  a.param = ctx.shard;  // fused cast (null: the executor casts)
  a.param_dtype = ctx.shard_dtype;
  return a;
}

static_assert(ops::kAdamW8bitBlock == scheduler::kQuantBlockNumel,
              "the graph's 8-bit blocks are the kernel's");

ops::AdamW8bitArgs AdamW8bitArgsFor(const scheduler::OptimizerContext& ctx) {
  ops::AdamW8bitArgs a;
  a.n = ctx.shard_numel;
  a.step = ctx.step + 1;
  a.grad_scale = static_cast<float>(ctx.grad_scale);
  a.master = ctx.master;
  a.grad = ctx.grad;
  a.grad_dtype = ctx.grad_dtype;
  a.moment1 = ctx.moment1_codes;
  a.moment2 = ctx.moment2_codes;
  a.absmax1 = ctx.moment1_absmax;
  a.absmax2 = ctx.moment2_absmax;
  a.param = ctx.shard;
  a.param_dtype = ctx.shard_dtype;
  return a;
}

Status AdamWOptimizerStep(const ops::AdamWConfig& config,
                          const scheduler::OptimizerContext& ctx) {
  if (ctx.moment1_codes != nullptr) {
    // On the device, or as host work on the host stream's view.
    return ops::AdamW8bitStep(*ctx.stream, config, AdamW8bitArgsFor(ctx));
  }
  const ops::AdamWArgs a = AdamWArgsFor(ctx);
  if (ctx.on_host) {
    static ops::HostPool* const pool = new ops::HostPool(ops::HostPool::HardwareThreads());
    return ops::HostAdamWOnStream(*ctx.stream, config, a, pool);
  }
  return ops::AdamWStep(*ctx.stream, config, a);
}

std::function<Status(const scheduler::OptimizerContext&)> AdamWHook(
    const ops::AdamWConfig& config) {
  return [config](const scheduler::OptimizerContext& ctx) {
    return AdamWOptimizerStep(config, ctx);
  };
}

}  // namespace baton::optim
