#include "baton/sim/tune.h"

#include <string>

#include "baton/scheduler/policy_file.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::ModelPreset;
using scheduler::ModelSpec;

// The data-parallel knobs (the mesh has its own tests below: searching it
// multiplies the configurations).
struct Case {
  ModelSpec model = *ModelPreset("llama3-8b");
  ClusterSpec cluster = *ClusterPreset("h100");
  Workload w;
  TuneOptions o;
  Case() {
    o.search_mesh = false;
    w.gpus = 32;
    w.seq = 4096;
    w.global_batch = 128;  // local batch 4: micro-batches 1, 2, 4
    w.micro_batch = 1;
  }
};

// The tuning of Case(), done once for the tests that only read it.
const StatusOr<TuneReport>& Tuned() {
  static const auto* tuned = new StatusOr<TuneReport>([] {
    Case c;
    return Tune(c.model, c.cluster, c.w, c.o);
  }());
  return *tuned;
}

TEST(TuneTest, SameInputSameAnswer) {
  Case c;
  const auto& a = Tuned();
  auto b = Tune(c.model, c.cluster, c.w, c.o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->best.size(), b->best.size());
  EXPECT_EQ(a->simulated, b->simulated);
  for (size_t i = 0; i < a->best.size(); ++i) {
    EXPECT_TRUE(scheduler::SamePolicy(a->best[i].policy, b->best[i].policy)) << i;
    EXPECT_EQ(a->best[i].workload.micro_batch, b->best[i].workload.micro_batch);
    EXPECT_EQ(a->best[i].result.step_s, b->best[i].result.step_s) << i;
  }
}

TEST(TuneTest, BestFitsIsSortedAndBeatsThePresets) {
  Case c;
  const auto& t = Tuned();
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->best.size(), 5u);
  EXPECT_GT(t->simulated, 10);
  for (size_t i = 0; i < t->best.size(); ++i) {
    EXPECT_TRUE(t->best[i].result.fits) << i;
    if (i > 0) {
      EXPECT_LE(t->best[i - 1].result.step_s, t->best[i].result.step_s);
    }
  }
  const double best = t->best[0].result.step_s;
  for (const char* preset : {"baton", "hsdp", "zeropp"}) {
    auto r = Simulate(c.model, c.cluster, c.w, preset);
    ASSERT_TRUE(r.ok()) << preset << ": " << r.status();
    if (r->fits) {
      EXPECT_LE(best, r->step_s) << preset;
    }
  }
  // Tuning is worth something on this case (a larger micro-batch and
  // bf16 reduction beat baton's defaults).
  EXPECT_LT(best, Simulate(c.model, c.cluster, c.w, "baton")->step_s);
}

// The winner, simulated again from its policy (and through a policy file),
// gives the same step time: the tuned schedule is the one that runs.
TEST(TuneTest, BestReproducesThroughAPolicyFile) {
  Case c;
  const auto& t = Tuned();
  ASSERT_TRUE(t.ok()) << t.status();
  for (const TuneCandidate& cand : t->best) {
    auto p = scheduler::PolicyFromJson(scheduler::PolicyToJson(cand.policy));
    ASSERT_TRUE(p.ok()) << p.status();
    auto r = SimulatePolicy(c.model, c.cluster, cand.workload, *p,
                            p->recompute_blocks);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step_s, cand.result.step_s) << DescribeKnobs(cand);
    EXPECT_EQ(r->memory.peak(), cand.result.memory.peak());
  }
}

// Tight memory: the tuner recomputes and prunes what cannot fit, and the
// winner fits.
TEST(TuneTest, TightMemoryIsRespected) {
  Case c;
  c.cluster.memory_gib = 18;
  auto t = Tune(c.model, c.cluster, c.w, c.o);
  ASSERT_TRUE(t.ok()) << t.status();
  const TuneCandidate& best = t->best[0];
  EXPECT_TRUE(best.result.fits);
  EXPECT_LE(best.result.memory.peak(), 18.0 * 1073741824.0);
  EXPECT_GT(best.policy.recompute_blocks, 0);
  EXPECT_GT(t->pruned, 0);  // shard groups of 8: 12 GiB of states alone
  // A cluster no configuration fits: refused, not a wrong answer.
  c.cluster.memory_gib = 5;
  auto none = Tune(c.model, c.cluster, c.w, c.o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
}

// Offload (master and moments on the host) is slower for the same
// recompute: on Case() (which fits with none) the tuner keeps it off; on
// llama3-70b on 16 H100s, which needs 79 GiB of device state per GPU
// without it, only offload fits.
TEST(TuneTest, OffloadWhereNothingElseFitsNotWhereItCostsTime) {
  const auto& t = Tuned();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->best[0].policy.offload, scheduler::Offload::kNone);

  Case c;
  c.model = *ModelPreset("llama3-70b");
  c.w.gpus = 16;
  c.w.global_batch = 16;
  TuneOptions data_only;
  data_only.search_mesh = false;
  auto big = Tune(c.model, c.cluster, c.w, data_only);
  ASSERT_TRUE(big.ok()) << big.status();
  const TuneCandidate& best = big->best[0];
  EXPECT_TRUE(best.result.fits);
  EXPECT_EQ(best.policy.offload, scheduler::Offload::kOptimizer);
  EXPECT_GT(best.result.host_bytes, 0u);
  EXPECT_NE(DescribeKnobs(best).find("offload=optimizer"), std::string::npos);
  for (const TuneCandidate& other : big->best) {
    if (other.policy.offload == scheduler::Offload::kNone) {
      EXPECT_FALSE(other.result.fits) << DescribeKnobs(other);
    }
  }
  // With the mesh searched, tensor and pipeline parallelism also fit it
  // without offload (the parameters split over tp x pp GPUs); the search
  // still finds the offload configuration, which is faster here, and
  // keeps the fastest that fits.
  TuneOptions all;
  all.keep = 1000;
  auto mesh = Tune(c.model, c.cluster, c.w, all);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_TRUE(mesh->best[0].result.fits);
  EXPECT_LE(mesh->best[0].result.step_s, best.result.step_s);
  const TuneCandidate* parallel = nullptr;
  for (const TuneCandidate& other : mesh->best) {
    if (parallel == nullptr && scheduler::IsParallel(other.policy) && other.result.fits &&
        other.policy.offload == scheduler::Offload::kNone) {
      parallel = &other;
    }
  }
  ASSERT_NE(parallel, nullptr);
  // A mesh candidate runs again from its policy file, to the nanosecond.
  auto p = scheduler::PolicyFromJson(scheduler::PolicyToJson(parallel->policy));
  ASSERT_TRUE(p.ok()) << p.status();
  auto again = SimulatePolicy(c.model, c.cluster, parallel->workload, *p, p->recompute_blocks);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step_s, parallel->result.step_s) << DescribeKnobs(*parallel);
}

// The memory techniques change the training, so the tuner uses them only
// when allowed (simulate --allow); given ones apply to every candidate.
// llama3-8b on 2 GPUs of 24 GiB: without them only offload and recompute
// fit; allowed LoRA over an NF4 base fits faster (no weight gradients,
// 4-bit gathers), and the winner runs again from its policy file.
TEST(TuneTest, TechniquesOnlyWhenAllowed) {
  const auto& plain = Tuned();
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const TuneCandidate& c : plain->best) {
    EXPECT_EQ(c.policy.optimizer, scheduler::OptimizerKind::kAdamW) << DescribeKnobs(c);
    EXPECT_EQ(c.policy.layout.lora_rank, 0) << DescribeKnobs(c);
  }
  Case c;
  c.cluster.memory_gib = 24;
  c.w.gpus = 2;
  c.w.seq = 2048;
  c.w.global_batch = 8;
  auto base = Tune(c.model, c.cluster, c.w, c.o);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE(base->best[0].result.fits);
  TuneOptions allowed = c.o;
  allowed.techniques.allow_adamw8bit = allowed.techniques.allow_lora =
      allowed.techniques.allow_nf4 = true;
  auto t = Tune(c.model, c.cluster, c.w, allowed);
  ASSERT_TRUE(t.ok()) << t.status();
  const TuneCandidate& best = t->best[0];
  EXPECT_TRUE(best.result.fits);
  EXPECT_EQ(best.policy.layout.lora_rank, 16) << DescribeKnobs(best);
  EXPECT_LT(best.result.step_s, base->best[0].result.step_s) << DescribeKnobs(best);
  EXPECT_NE(DescribeKnobs(best).find(" lora=16"), std::string::npos) << DescribeKnobs(best);
  auto p = scheduler::PolicyFromJson(scheduler::PolicyToJson(best.policy));
  ASSERT_TRUE(p.ok()) << p.status();
  auto again = SimulatePolicy(c.model, c.cluster, best.workload, *p, p->recompute_blocks);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step_s, best.result.step_s);
  // Given (not allowed): every candidate has them.
  TuneOptions given = c.o;
  given.techniques.optimizer = scheduler::OptimizerKind::kAdamW8bit;
  given.techniques.lora_rank = 8;
  auto g = Tune(c.model, c.cluster, c.w, given);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const TuneCandidate& k : g->best) {
    EXPECT_EQ(k.policy.optimizer, scheduler::OptimizerKind::kAdamW8bit) << DescribeKnobs(k);
    EXPECT_EQ(k.policy.layout.lora_rank, 8) << DescribeKnobs(k);
    EXPECT_EQ(k.policy.layout.base_dtype, scheduler::BaseDtype::kParam) << DescribeKnobs(k);
  }
  // NF4 alone has nothing to train; a rank above a matrix is named.
  TuneOptions nf4 = c.o;
  nf4.techniques.allow_nf4 = true;
  auto r = Tune(c.model, c.cluster, c.w, nf4);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("needs LoRA"), std::string::npos) << r.status();
  nf4.techniques.lora_rank = 5000;
  r = Tune(c.model, c.cluster, c.w, nf4);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("larger than the matrix"), std::string::npos) << r.status();
}

TEST(TuneTest, BadOptionsAreRefused) {
  Case c;
  TuneOptions o;
  o.keep = 0;
  EXPECT_EQ(Tune(c.model, c.cluster, c.w, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.w.global_batch = 100;  // not a multiple of the 32 GPUs
  TuneOptions data_only;
  data_only.search_mesh = false;
  EXPECT_EQ(Tune(c.model, c.cluster, c.w, data_only).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A mesh leaves 100 / 4 per data rank with tp x pp = 8.
  auto mesh = Tune(c.model, c.cluster, c.w);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(100 % mesh->best[0].workload.data_ranks(), 0);
  c.w.gpus = 0;
  EXPECT_EQ(Tune(c.model, c.cluster, c.w).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A head dim the attention kernel cannot run is named as such, not
// reported as "no configuration fits".
TEST(TuneTest, HeadDimTheKernelCannotRunIsNamed) {
  Case c;
  c.model.head_dim = 160;
  TuneOptions o;
  o.sim.attention = *AttentionKernelPreset("triton", "h100");
  auto r = Tune(c.model, c.cluster, c.w, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("head dims up to 128"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace baton::sim
