#include "baton/scheduler/testing/checkpoint_toy.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/checkpoint_io.h"

namespace baton::scheduler::testing {

ModelSpec Micro() { return *ModelPreset("micro"); }

Policy Fp32Preset(const std::string& name, int shard_group) {
  Policy p = *PolicyPreset(name);
  p.param_dtype = DataType::kF32;
  if (shard_group >= 0) p.shard_group = shard_group;
  return p;
}

StepCallbacks WithMoments(StepCallbacks cb) {
  auto update = cb.optimizer;
  cb.optimizer = [update](const OptimizerContext& ctx) -> Status {
    BATON_RETURN_IF_ERROR(update(ctx));
    return ctx.stream->Enqueue([ctx]() {
      const float* g = static_cast<const float*>(ctx.grad);
      const float scale = static_cast<float>(ctx.grad_scale);
      for (int64_t i = 0; i < ctx.shard_numel; ++i) {
        ctx.moment1[i] = ctx.moment1[i] * 0.5f + g[i] * scale;
        ctx.moment2[i] += g[i] * scale * g[i] * scale;
      }
      return absl::OkStatus();
    });
  };
  return cb;
}

std::string RunToy(const ToyRunSpec& job, std::vector<SaveStats>* stats) {
  auto group = CreateInprocGroup(job.ranks);
  if (!group.ok()) return group.status().ToString();
  ToyModel toy(job.ranks);
  std::vector<std::string> errors(job.ranks);
  // The first rank to fail (before its Abort, which fails the others with
  // "rank N aborted"): its error is the cause, the one returned.
  std::atomic<int> first_failed{-1};
  if (stats != nullptr) stats->assign(job.ranks, SaveStats{});
  RunRanks(job.ranks, [&](int r) {
    auto fail = [&](const Status& st) {
      errors[r] = st.ToString();
      int none = -1;
      first_failed.compare_exchange_strong(none, r);
      group->comms[r]->Abort();
    };
    auto graph = BuildStepGraph(job.spec, job.policy, job.ranks);
    if (!graph.ok()) return fail(graph.status());
    auto exec = Executor::Create(*graph, *group->device, *group->comms[r]);
    if (!exec.ok()) return fail(exec.status());
    Executor& e = **exec;
    Status st;
    if (job.load.empty()) {
      st = e.InitParameters([](const ParamSlot& p, float* out) {
        for (int64_t i = 0; i < p.numel; ++i) out[i] = InitialValue(p, i);
      });
    } else {
      LoadOptions lo;
      lo.fs = job.fs;
      st = e.Load(job.load, lo).status();
    }
    const StepCallbacks cb = WithMoments(toy.Callbacks(r));
    for (int s = 0; st.ok() && s < job.steps; ++s) st = e.Step(cb);
    if (st.ok() && !job.save_root.empty()) {
      SaveOptions so;
      so.root = job.save_root;
      so.data_position = e.steps_issued() * 100;
      so.fs = job.fs;
      st = e.Save(so);
      if (st.ok()) st = e.WaitForSave(stats != nullptr ? &(*stats)[r] : nullptr);
    }
    if (st.ok()) st = e.Synchronize();
    if (!st.ok()) return fail(st);
    if (job.compare != nullptr) errors[r] = ToyModel::CompareShards(e, *job.compare);
  });
  const int first = first_failed.load();
  if (first >= 0) return absl::StrCat("rank ", first, ": ", errors[first]);
  for (int r = 0; r < job.ranks; ++r) {  // a shard comparison's mismatch
    if (!errors[r].empty()) return absl::StrCat("rank ", r, ": ", errors[r]);
  }
  return "";
}

ToyModel::Reference Advance(ToyModel::Reference ref, int ranks, int steps,
                            const ModelSpec& spec) {
  auto layout = LayoutFor(spec, Fp32Preset("baton"), *ResolveMesh(Fp32Preset("baton"), 1));
  for (int s = 0; s < steps; ++s) ToyModel::ReferenceStep(*layout, ranks, 1, DataType::kF32, ref);
  return ref;
}

ToyModel::Reference Initial(const ModelSpec& spec) {
  auto layout = LayoutFor(spec, Fp32Preset("baton"), *ResolveMesh(Fp32Preset("baton"), 1));
  return ToyModel::InitialReference(*layout);
}

std::string CompareCheckpoints(const std::string& a, const std::string& b) {
  auto da = FindCheckpoint(PosixFs(), a), db = FindCheckpoint(PosixFs(), b);
  if (!da.ok() || !db.ok()) return "missing checkpoint";
  auto ma = ReadManifest(PosixFs(), *da), mb = ReadManifest(PosixFs(), *db);
  if (!ma.ok()) return ma.status().ToString();
  if (!mb.ok()) return mb.status().ToString();
  if (ma->header.params.size() != mb->header.params.size()) return "parameter counts differ";
  if (ma->header.step != mb->header.step) return "steps differ";
  for (size_t p = 0; p < ma->header.params.size(); ++p) {
    for (int t = 0; t < kNumStateTensors; ++t) {
      auto x = ReadTensor(PosixFs(), *da, *ma, static_cast<int>(p), static_cast<StateTensor>(t));
      auto y = ReadTensor(PosixFs(), *db, *mb, static_cast<int>(p), static_cast<StateTensor>(t));
      if (!x.ok() || !y.ok()) return "read failed";
      if (x->size() != y->size() ||
          std::memcmp(x->data(), y->data(), x->size() * sizeof(float)) != 0) {
        return absl::StrCat(ma->header.params[p].name, " ",
                            StateTensorName(static_cast<StateTensor>(t)), " differs");
      }
    }
  }
  return "";
}

}  // namespace baton::scheduler::testing
