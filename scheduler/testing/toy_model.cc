#include "baton/scheduler/testing/toy_model.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "baton/comm/factory.h"

namespace baton::scheduler::testing {
namespace {

int64_t Floor4(double p) { return static_cast<int64_t>(std::floor(4.0 * p)); }
int64_t Mod(int64_t x, int64_t m) { return ((x % m) + m) % m; }

float Seen(float master, DataType t) {
  return t == DataType::kBF16 ? Bf16ToFloat(FloatToBf16(master))
         : t == DataType::kF16 ? F16ToFloat(FloatToF16(master))
                               : master;
}

float Grad(int rank, int micro, int unit, int64_t i, double p, int64_t act) {
  return static_cast<float>((rank + 1) * (Mod(7 * i + unit, 5) - 2) +
                            Mod(Floor4(p), 13) + Mod(act, 7) + micro);
}

}  // namespace

void RunRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

StatusOr<InprocGroup> CreateInprocGroup(int n, bool event_protocol) {
  InprocGroup g;
  BATON_ASSIGN_OR_RETURN(g.device, CreateHostDevice());
  CommConfig cfg;
  cfg.device = g.device.get();
  cfg.group = "";  // a fresh name
  cfg.timeout = absl::Seconds(60);
  cfg.inproc_event_protocol = event_protocol;
  BATON_ASSIGN_OR_RETURN(g.comms, baton::CreateInprocGroup(n, cfg));
  return g;
}

float InitialValue(const ParamSlot& slot, int64_t i) {
  uint64_t h = 1469598103934665603ull;
  for (char c : slot.name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
  h ^= h >> 29;
  return static_cast<float>(static_cast<int64_t>(h % 17) - 8) / 8.0f;
}

StepCallbacks ToyModel::Callbacks(int rank) {
  StepCallbacks cb;
  cb.compute = [this, rank](const ComputeContext& ctx) -> Status {
    struct View { const void* p; DataType t; int64_t n; };
    std::vector<View> params;
    for (const TensorView& v : ctx.params) {
      params.push_back({v.data, v.dtype, v.param->numel});
    }
    std::vector<View> grads;
    for (const TensorView& v : ctx.grads) {
      grads.push_back({v.data, v.dtype, v.param->numel});
    }
    const NodeKind kind = ctx.kind;
    const int m = ctx.micro_step, u = ctx.unit;
    std::vector<bool> acc = ctx.grad_accumulate;
    return ctx.stream->Enqueue([this, rank, kind, m, u, params, grads, acc]() {
      if (kind != NodeKind::kBackward) {
        int64_t sum = 0;
        for (const View& v : params) {
          for (int64_t i = 0; i < v.n; ++i) sum += Floor4(LoadAsDouble(v.p, v.t, i));
        }
        std::lock_guard<std::mutex> lock(mu_);
        const int64_t a = Mod(sum, 1009);
        auto [it, fresh] = act_[rank].insert({{m, u}, a});
        if (kind == NodeKind::kRecompute && !fresh && it->second != a) {
          return absl::DataLossError(absl::StrCat(
              "recompute of unit ", u, " saw other parameters than its forward"));
        }
        if (kind == NodeKind::kForward) it->second = a;
        return absl::OkStatus();
      }
      int64_t a;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = act_[rank].find({m, u});
        if (it == act_[rank].end()) {
          return absl::DataLossError(absl::StrCat("backward of unit ", u,
                                                  " before its forward"));
        }
        a = it->second;
      }
      for (size_t k = 0; k < params.size(); ++k) {
        const View& p = params[k];
        const View& g = grads[k];
        if (g.p == nullptr) continue;  // frozen: no gradient
        for (int64_t i = 0; i < p.n; ++i) {
          const float gi = Grad(rank, m, u, i, LoadAsDouble(p.p, p.t, i), a);
          void* gp = const_cast<void*>(g.p);
          const double prev = acc[k] ? LoadAsDouble(gp, g.t, i) : 0.0;
          StoreFromDouble(gp, g.t, i, prev + gi);
        }
      }
      return absl::OkStatus();
    });
  };
  cb.optimizer = [](const OptimizerContext& ctx) -> Status {
    float* master = ctx.master;
    const void* grad = ctx.grad;
    const DataType t = ctx.grad_dtype;
    const int64_t n = ctx.shard_numel;
    const float scale = static_cast<float>(ctx.grad_scale);
    return ctx.stream->Enqueue([master, grad, t, n, scale]() {
      for (int64_t i = 0; i < n; ++i) {
        const float g = static_cast<float>(LoadAsDouble(grad, t, i));
        master[i] = master[i] - 0.0625f * (g * scale);
      }
      return absl::OkStatus();
    });
  };
  return cb;
}

ToyModel::Reference ToyModel::InitialReference(const ModelLayout& layout) {
  Reference ref;
  for (const Bucket& b : layout.buckets) {
    for (const ParamSlot& p : b.params) {
      std::vector<float> v(p.numel);
      for (int64_t i = 0; i < p.numel; ++i) v[i] = InitialValue(p, i);
      ref.params[p.name] = std::move(v);
    }
  }
  return ref;
}

void ToyModel::ReferenceStep(const ModelLayout& layout, int ranks,
                             int micro_steps, DataType param_dtype,
                             Reference& ref) {
  std::map<std::string, std::vector<float>> total;
  for (auto& [name, v] : ref.params) total[name].assign(v.size(), 0.0f);
  const int nu = static_cast<int>(layout.units.size());
  for (int m = 0; m < micro_steps; ++m) {
    for (int r = 0; r < ranks; ++r) {
      for (int u = 0; u < nu; ++u) {
        int64_t sum = 0;
        for (const ParamRef& pr : layout.unit_params[u]) {
          const ParamSlot& s = layout.buckets[pr.bucket].params[pr.slot];
          for (float x : ref.params[s.name]) sum += Floor4(Seen(x, param_dtype));
        }
        const int64_t a = Mod(sum, 1009);
        for (const ParamRef& pr : layout.unit_params[u]) {
          const ParamSlot& s = layout.buckets[pr.bucket].params[pr.slot];
          const std::vector<float>& p = ref.params[s.name];
          std::vector<float>& g = total[s.name];
          for (int64_t i = 0; i < s.numel; ++i) {
            g[i] += Grad(r, m, u, i, Seen(p[i], param_dtype), a);
          }
        }
      }
    }
  }
  const float scale =
      static_cast<float>(1.0 / (static_cast<double>(ranks) * micro_steps));
  std::map<std::string, bool> frozen;
  for (const Bucket& b : layout.buckets) {
    for (const ParamSlot& s : b.params) frozen[s.name] = s.frozen;
  }
  for (auto& [name, p] : ref.params) {
    if (frozen[name]) continue;  // never trained
    const std::vector<float>& g = total[name];
    for (size_t i = 0; i < p.size(); ++i) p[i] = p[i] - 0.0625f * (g[i] * scale);
  }
}

std::string ToyModel::CompareShards(Executor& executor, const Reference& ref) {
  const ModelLayout& layout = executor.graph().layout;
  const int rank = executor.shard_rank();
  for (const Bucket& b : layout.buckets) {
    if (b.frozen) continue;  // no master
    auto shard = executor.ReadMaster(b.id);
    if (!shard.ok()) return shard.status().ToString();
    const int64_t begin = layout.sharding.shard ? rank * b.shard_numel : 0;
    for (const ParamSlot& p : b.params) {
      const std::vector<float>& want = ref.params.at(p.name);
      for (int64_t i = 0; i < p.numel; ++i) {
        const int64_t at = p.offset + i - begin;
        if (at < 0 || at >= b.shard_numel) continue;
        const float got = (*shard)[at];
        if (std::memcmp(&got, &want[i], sizeof(float)) != 0) {
          return absl::StrCat("rank ", rank, " ", p.name, "[", i, "] = ", got,
                              ", reference ", want[i]);
        }
      }
    }
  }
  return "";
}

ToyRun TrainToy(const ModelSpec& spec, const Policy& policy, int ranks, int steps,
                const ExecutorOptions& options, CastBy cast, bool compare) {
  ToyRun result;
  auto group = CreateInprocGroup(ranks);
  if (!group.ok()) {
    result.error = group.status().ToString();
    return result;
  }
  ToyModel toy(ranks);
  std::vector<std::string> errors(ranks);
  result.traces.resize(ranks);
  result.orders.resize(ranks);
  auto layout = LayoutFor(spec, policy, *ResolveMesh(policy, ranks));
  if (!layout.ok()) {
    result.error = layout.status().ToString();
    return result;
  }
  ToyModel::Reference ref = ToyModel::InitialReference(*layout);
  for (int s = 0; s < steps; ++s) {
    ToyModel::ReferenceStep(*layout, ranks, policy.micro_steps,
                            policy.param_dtype, ref);
  }
  RunRanks(ranks, [&](int r) {
    // Every rank builds its own graph, as a real job does.
    auto graph = BuildStepGraph(spec, policy, ranks);
    if (!graph.ok()) {
      errors[r] = graph.status().ToString();
      return;
    }
    result.orders[r] = graph->ToText();
    auto exec = Executor::Create(*graph, *group->device, *group->comms[r], options);
    if (!exec.ok()) {
      errors[r] = exec.status().ToString();
      return;
    }
    Status st = (*exec)->InitParameters(
        [](const ParamSlot& p, float* out) {
          for (int64_t i = 0; i < p.numel; ++i) out[i] = InitialValue(p, i);
        });
    StepCallbacks cb = toy.Callbacks(r);
    if (cast != CastBy::kExecutor) {
      cb.optimizer_writes_shard = true;
      auto update = cb.optimizer;
      const bool write = cast == CastBy::kOptimizer;
      cb.optimizer = [update, write](const OptimizerContext& ctx) -> Status {
        if (ctx.shard == nullptr) return absl::InternalError("no shard pointer");
        BATON_RETURN_IF_ERROR(update(ctx));
        if (!write) return absl::OkStatus();
        return ctx.stream->Enqueue([ctx]() {
          NarrowFromF32(ctx.shard, ctx.master, ctx.shard_dtype, ctx.shard_numel);
          return absl::OkStatus();
        });
      };
    }
    for (int s = 0; st.ok() && s < steps; ++s) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    if (!st.ok()) {
      errors[r] = st.ToString();
      group->comms[r]->Abort();
      return;
    }
    if (compare) errors[r] = ToyModel::CompareShards(**exec, ref);
    result.traces[r] = (*exec)->TakeTrace();
  });
  for (int r = 0; r < ranks; ++r) {
    if (!errors[r].empty() && result.error.empty()) {
      result.error = "rank " + std::to_string(r) + ": " + errors[r];
    }
  }
  return result;
}

}  // namespace baton::scheduler::testing
