// ZenFlow in the executor through its driver (optim/zenflow_driver.h; host
// runtime, inproc ranks) against the plain
// reference of its algorithm (ops::ZenFlowReference), step by step: the
// weights every forward sees equal the reference's, bit for bit, and so
// does every rank's host master after the last step. With bf16
// parameters the forward sees the reference's weights rounded to bf16; with
// micro_steps > 1 the reference steps with the micro-steps' mean gradient.
//
// The gradients are synthetic (the backward writes a fixed function of the
// step, the micro-step and the element, independent of the weights):
// k/1024 with |k| <= 64, the same on every rank, exact in bf16 too. Their
// sums over ranks and micro-steps, the 1/(ranks x micro_steps) scaling
// (both powers of two) and the column sums of squares are then exact in
// any order, so the executor's per-shard partial norms, all-reduced over
// the shard group, equal the reference's row-order sums bit for bit and the
// selection is the same; with general gradients they could differ in the
// last place, and the selection only between columns whose norms tie to
// rounding.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/testing/zenflow_reference.h"
#include "baton/optim/zenflow_driver.h"
#include "baton/runtime/dtype.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/testing/step_trace_check.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::optim {
namespace {

using namespace ::baton::scheduler;  // the executor's types, throughout
namespace testing = ::baton::scheduler::testing;
using testing::CreateInprocGroup;
using testing::RunRanks;

float Grad(int64_t step, const ParamSlot& p, int64_t i) {
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull ^
               std::hash<std::string>{}(p.name);
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int>(h % 129) - 64) / 1024.0f;
}

// A tensor's element `i` as f32 (f32 or bf16 storage), and the store.
float ReadAt(const TensorView& t, int64_t i) {
  if (t.dtype == DataType::kBF16) return Bf16ToFloat(static_cast<const uint16_t*>(t.data)[i]);
  return static_cast<const float*>(t.data)[i];
}
void WriteAt(const TensorView& t, int64_t i, float v) {
  if (t.dtype == DataType::kBF16) {
    static_cast<uint16_t*>(t.data)[i] = FloatToBf16(v);
  } else {
    static_cast<float*>(t.data)[i] = v;
  }
}
std::vector<float> ReadAsF32(const TensorView& t) {
  std::vector<float> v(t.param->numel);
  for (int64_t i = 0; i < t.param->numel; ++i) v[i] = ReadAt(t, i);
  return v;
}

// The weights a forward sees when the parameters are stored as `t`.
std::vector<float> RoundTo(DataType t, std::vector<float> v) {
  if (t == DataType::kBF16) {
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  }
  return v;
}

// Every forward's view of every parameter, per rank: seen[rank][step][name].
using Seen = std::vector<std::map<int64_t, std::map<std::string, std::vector<float>>>>;
// After the run: each rank's host master (fp32) per bucket shard,
// masters[rank][bucket], read with Executor::ReadMaster.
using Masters = std::vector<std::vector<std::vector<float>>>;

// A CAST node of a window's last step: the window's host update.
bool WindowEndCast(NodeKind kind, int64_t step, int update_interval) {
  return kind == NodeKind::kCast && (step + 1) % update_interval == 0;
}

// Makes the host update of every window slow by a random 0..max_ms (so a
// missing event shows as a difference from the reference): with
// staleness > 0 it first waits until a forward of the next step has
// started, which nothing may hold back then (5 s at most).
class SlowUpdate : public NodeObserver {
 public:
  // `steps`: the steps that will run (the last one has no next forward).
  SlowUpdate(const StepGraph& g, int64_t steps, bool gate, uint64_t seed, int max_ms)
      : update_(ResolveZenFlow(g.policy).update), steps_(steps), gate_(gate), rng_(seed),
        max_ms_(max_ms) {
    for (const Node& n : g.nodes) kinds_.push_back(n.kind);
  }

  Status Observe(int node, int64_t step, Point point, Stream& stream) override {
    if (point != Point::kBeforeWork) return absl::OkStatus();
    const NodeKind kind = kinds_[node];
    if (kind == NodeKind::kForward) {
      return stream.Enqueue([this, step]() {
        std::lock_guard<std::mutex> lock(mu_);
        started_ = std::max(started_, step);
        cv_.notify_all();
        return absl::OkStatus();
      });
    }
    if (!WindowEndCast(kind, step, update_)) return absl::OkStatus();
    const int ms = static_cast<int>(rng_() % (max_ms_ + 1));
    return stream.Enqueue([this, step, ms]() {
      if (gate_ && step + 1 < steps_) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(5), [&] { return started_ > step; });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return absl::OkStatus();
    });
  }

 private:
  std::vector<NodeKind> kinds_;
  const int update_;
  const int64_t steps_;
  const bool gate_;
  std::mt19937_64 rng_;
  const int max_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t started_ = -1;
};

StatusOr<Seen> RunExecutor(const Policy& policy, int ranks, int steps,
                           const ops::AdamWConfig& adamw, Masters* masters) {
  BATON_ASSIGN_OR_RETURN(testing::InprocGroup group, CreateInprocGroup(ranks));
  std::vector<Status> errors(ranks);
  Seen seen(ranks);
  std::vector<int> micro_differ(ranks, 0);
  masters->assign(ranks, {});
  RunRanks(ranks, [&](int r) {
    errors[r] = [&]() -> Status {
      BATON_ASSIGN_OR_RETURN(StepGraph graph,
                             BuildStepGraph(*ModelPreset("micro"), policy, ranks));
      BATON_RETURN_IF_ERROR(VerifyStepGraph(graph));
      SlowUpdate slow(graph, steps, ResolveZenFlow(policy).staleness > 0, 7 + r, 12);
      ExecutorOptions o;
      o.optimizer_driver = ZenFlowDriverFactory(adamw);
      o.max_delay_us = 20;  // reorders the streams' work where edges allow
      o.poison = true;
      o.observer = &slow;
      BATON_ASSIGN_OR_RETURN(auto exec, Executor::Create(std::move(graph),
                                                         *group.device,
                                                         *group.comms[r], o));
      BATON_RETURN_IF_ERROR(exec->InitParameters([](const ParamSlot& p, float* out) {
        for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
      }));
      auto* mine = &seen[r];
      auto* differ = &micro_differ[r];
      const int micro = policy.micro_steps;
      // (step, micro-step, parameter) a backward already wrote: a tied
      // weight's second user in the same micro-step adds nothing.
      auto written = std::make_shared<std::set<std::tuple<int64_t, int, std::string>>>();
      StepCallbacks cb;
      cb.compute = [mine, differ, micro, written](const ComputeContext& ctx) -> Status {
        if (ctx.kind == NodeKind::kRecompute) return absl::OkStatus();
        std::vector<TensorView> params = ctx.params, grads = ctx.grads;
        const int64_t step = ctx.step;
        const int m = ctx.micro_step;
        const bool fwd = ctx.kind == NodeKind::kForward;
        // Per gradient: 0 skip, 1 assign, 2 add (an earlier micro-step's
        // value is in the buffer).
        std::vector<int> mode(grads.size(), 0);
        if (!fwd) {
          for (size_t k = 0; k < grads.size(); ++k) {
            if (!written->insert({step, m, grads[k].param->name}).second) continue;
            mode[k] = ctx.grad_accumulate[k] ? 2 : 1;
          }
        }
        return ctx.stream->Enqueue([=]() {
          for (size_t k = 0; k < params.size(); ++k) {
            const ParamSlot& p = *params[k].param;
            if (fwd) {
              std::vector<float> v = ReadAsF32(params[k]);
              auto& slot = (*mine)[step][p.name];
              if (m == 0) {
                slot = std::move(v);
              } else if (v != slot) {
                ++*differ;  // every micro-step's forward sees the same weights
              }
              continue;
            }
            if (mode[k] == 0) continue;
            for (int64_t i = 0; i < p.numel; ++i) {
              float g = Grad(step * micro + m, p, i);
              if (mode[k] == 2) g += ReadAt(grads[k], i);
              WriteAt(grads[k], i, g);
            }
          }
          return absl::OkStatus();
        });
      };
      for (int s = 0; s < steps; ++s) BATON_RETURN_IF_ERROR(exec->Step(cb));
      // ReadMaster synchronizes every stream, the host-update stream's
      // last (possibly still running) update included.
      for (int b = 0; b < static_cast<int>(exec->graph().layout.buckets.size()); ++b) {
        BATON_ASSIGN_OR_RETURN(auto m, exec->ReadMaster(b));
        (*masters)[r].push_back(std::move(m));
      }
      return exec->Synchronize();
    }();
    if (!errors[r].ok()) group.comms[r]->Abort();
  });
  for (const Status& st : errors) BATON_RETURN_IF_ERROR(st);
  for (int r = 0; r < ranks; ++r) {
    if (micro_differ[r] != 0) {
      return absl::InternalError(absl::StrCat(
          "rank ", r, ": ", micro_differ[r], " later micro-step forwards saw other weights"));
    }
  }
  return seen;
}

// 1-D parameters take the host path whole (optim/zenflow_state.h).
struct HostOnly {
  std::vector<float> device, master, m1, m2, accum, pending;
  int64_t updates = 0;
  int64_t pending_at = -1;  // the step whose forward first sees `pending`
};

void Compare(const Policy& policy, int ranks, int steps) {
  ops::AdamWConfig adamw;
  adamw.lr = 0.01f;
  adamw.weight_decay = 0.1f;
  Masters masters;
  const auto seen = RunExecutor(policy, ranks, steps + 1, adamw, &masters);
  ASSERT_TRUE(seen.ok()) << seen.status();
  const ZenFlowIntervals z = ResolveZenFlow(policy);
  auto layout = LayoutFor(*ModelPreset("micro"), policy, *ResolveMesh(policy, ranks));
  ASSERT_TRUE(layout.ok());
  int matrices = 0, vectors = 0;
  bool split_columns = false;
  for (int b = 0; b < static_cast<int>(layout->buckets.size()); ++b) {
    const Bucket& bk = layout->buckets[b];
    for (const ParamSlot& p : bk.params) {
      std::vector<float> init(p.numel);
      for (int64_t i = 0; i < p.numel; ++i) init[i] = testing::InitialValue(p, i);
      const bool matrix = p.shape.size() == 2;
      // Columns that span several ranks' shards: the rows of p lie in more
      // than one shard.
      if (matrix && ranks > 1 &&
          p.offset / bk.shard_numel != (p.offset + p.numel - 1) / bk.shard_numel) {
        split_columns = true;
      }
      ops::ZenFlowReferenceOptions ro;
      if (matrix) {
        ro.rows = p.shape[0];
        ro.cols = p.shape[1];
      }
      ro.adamw = adamw;
      ro.zenflow.topk_ratio = policy.zenflow_topk_ratio;
      ro.zenflow.select_interval = z.select;
      ro.zenflow.update_interval = z.update;
      ro.staleness = z.staleness;
      auto ref = ops::ZenFlowReference::Create(ro, init);
      HostOnly h{init, init, std::vector<float>(p.numel), std::vector<float>(p.numel),
                 std::vector<float>(p.numel)};
      if (matrix) {
        ASSERT_TRUE(ref.ok()) << ref.status();
        ++matrices;
      } else {
        ++vectors;
      }
      int64_t selects = 0, updates = 0;
      for (int64_t s = 0; s <= steps; ++s) {
        if (h.pending_at == s) h.device = h.pending;
        const std::vector<float> want =
            RoundTo(policy.param_dtype, matrix ? ref->weights() : h.device);
        for (int r = 0; r < ranks; ++r) {
          const auto at = (*seen)[r].find(s);
          ASSERT_NE(at, (*seen)[r].end()) << "no forward at step " << s;
          const auto it = at->second.find(p.name);
          ASSERT_NE(it, at->second.end()) << p.name;
          ASSERT_EQ(it->second.size(), want.size());
          ASSERT_EQ(std::memcmp(it->second.data(), want.data(), want.size() * 4), 0)
              << p.name << " differs from the reference at step " << s
              << " on rank " << r << " of " << ranks;
        }
        // The effective gradient: the mean over the micro-steps (exact:
        // multiples of 1/1024, micro_steps a power of two).
        const int micro = policy.micro_steps;
        std::vector<float> g(p.numel);
        for (int64_t i = 0; i < p.numel; ++i) {
          float sum = 0.0f;
          for (int m = 0; m < micro; ++m) sum += Grad(s * micro + m, p, i);
          g[i] = sum * (1.0f / static_cast<float>(micro));
        }
        if (matrix) {
          const int64_t before = ref->host_updates();
          ASSERT_TRUE(ref->Step(g).ok());
          updates += ref->host_updates() - before;
          selects += s % z.select == 0;
          if (s == steps) break;
          continue;
        }
        for (int64_t i = 0; i < p.numel; ++i) h.accum[i] += g[i];
        if ((s + 1) % z.update != 0) continue;
        ops::AdamWArgs a;
        a.n = p.numel;
        a.step = ++h.updates;
        a.grad_scale = 1.0f / static_cast<float>(z.update);
        a.master = h.master.data();
        a.grad = h.accum.data();
        a.moment1 = h.m1.data();
        a.moment2 = h.m2.data();
        ASSERT_TRUE(ops::HostAdamW(adamw, a, nullptr).ok());
        std::fill(h.accum.begin(), h.accum.end(), 0.0f);
        h.pending = h.master;
        h.pending_at = s + 1 + z.staleness;
      }
      // The executor ran step `steps` too (its forward is the last one
      // checked above); after it, every rank's host master holds what the
      // reference's does, the last window's update included even when no
      // forward has seen it yet.
      const std::vector<float>& want_master = matrix ? ref->host_master() : h.master;
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(masters[r].size(), layout->buckets.size());
        const std::vector<float>& m = masters[r][b];
        ASSERT_EQ(static_cast<int64_t>(m.size()), bk.shard_numel);
        for (int64_t i = 0; i < p.numel; ++i) {
          const int64_t at = p.offset + i - r * bk.shard_numel;
          if (at < 0 || at >= bk.shard_numel) continue;
          ASSERT_EQ(std::memcmp(&m[at], &want_master[i], 4), 0)
              << p.name << "[" << i << "]: host master " << m[at] << ", reference "
              << want_master[i] << ", rank " << r << " of " << ranks << " after "
              << steps + 1 << " steps";
        }
      }
      if (matrix) {
        EXPECT_GE(selects, 2) << p.name;
        EXPECT_GE(updates, 2) << p.name;
        // The device path moved the selected columns away from the start.
        EXPECT_NE(std::memcmp(ref->weights().data(), init.data(), p.numel * 4), 0);
      }
    }
  }
  EXPECT_GT(matrices, 0);
  EXPECT_GT(vectors, 0);
  if (ranks > 1) {
    EXPECT_TRUE(split_columns);
  }
}

Policy ZenFlow(int select, int update, double ratio, int staleness = 0) {
  Policy p = *PolicyPreset("zenflow");
  p.zenflow_staleness = staleness;
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.zenflow_topk_ratio = ratio;
  p.zenflow_select_interval = select;
  p.zenflow_update_interval = update;
  return p;
}

TEST(ZenFlowExecTest, OneRankMatchesTheReference) {
  Compare(ZenFlow(4, 2, 0.25), 1, 9);
}

TEST(ZenFlowExecTest, TwoRanksMatchTheReference) {
  Compare(ZenFlow(4, 2, 0.25), 2, 9);
  Compare(ZenFlow(2, 1, 0.1), 2, 8);
}

TEST(ZenFlowExecTest, FourRanksMatchTheReference) {
  Compare(ZenFlow(kAutoInterval, kAutoInterval, 0.05), 4, 9);
}

// Staleness 0, 1 and update_interval - 1, with select == update and select
// = 2 x update, bit for bit against the reference at every forward; random
// delays before every node (the host update's included) let a missing
// event show as a difference.
void CompareStaleness(int ranks) {
  for (int select : {3, 6}) {
    for (int d : {0, 1, 2}) {
      SCOPED_TRACE(absl::StrCat(ranks, " ranks, select ", select, ", update 3, staleness ", d));
      Compare(ZenFlow(select, 3, 0.25, d), ranks, 14);
    }
  }
}

TEST(ZenFlowExecTest, StalenessOneRankMatchesTheReference) { CompareStaleness(1); }
TEST(ZenFlowExecTest, StalenessTwoRanksMatchTheReference) { CompareStaleness(2); }
TEST(ZenFlowExecTest, StalenessFourRanksMatchTheReference) {
  CompareStaleness(4);
  // The preset: everything auto (update 4, select 4, staleness 3).
  Compare(ZenFlow(kAutoInterval, kAutoInterval, 0.05, kAutoInterval), 4, 10);
}

// Gradient accumulation: micro_steps = 2, each micro-step's backward its
// own gradient; the reference steps with their mean (grad_scale =
// 1 / (ranks x micro_steps)), with and without a reduction per micro-step.
TEST(ZenFlowExecTest, MicroStepsMatchTheReference) {
  for (bool every : {false, true}) {
    for (int d : {0, 1}) {
      SCOPED_TRACE(absl::StrCat("reduce_every_micro_step ", every, ", staleness ", d));
      Policy p = ZenFlow(4, 2, 0.25, d);
      p.micro_steps = 2;
      p.reduce_every_micro_step = every;
      Compare(p, 2, 9);
    }
  }
}

// bf16 parameters: every forward sees the reference's weights rounded to
// bf16 (round to nearest even, runtime/dtype.h); the host master stays the
// reference's fp32 one. Reduce in f32 and in bf16 (the synthetic gradients
// and their sums over two ranks are exact in bf16).
TEST(ZenFlowExecTest, Bf16ParamsMatchTheReference) {
  for (DataType reduce : {DataType::kF32, DataType::kBF16}) {
    for (int d : {0, 2}) {
      SCOPED_TRACE(absl::StrCat("reduce ", DataTypeName(reduce), ", staleness ", d));
      Policy p = ZenFlow(3, 3, 0.25, d);
      p.param_dtype = DataType::kBF16;
      p.reduce_dtype = reduce;
      Compare(p, 2, 11);
    }
  }
}

// Orders the host update against the next step's forwards. Every ZenFlow
// CAST node of a window's last step (the host update, on its own stream)
// is made slow: with `gate` it cannot finish before a forward of the next
// step that reads its bucket has started (so the test cannot pass on
// timing: if an event held that forward back, the gate would time out and
// the test fail); without, it sleeps. Positions come from one counter.
class OverlapProbe : public NodeObserver {
 public:
  OverlapProbe(const StepGraph& g, int update, bool gate)
      : g_(g), update_(update), gate_(gate) {}

  Status Observe(int node, int64_t step, Point point, Stream& stream) override {
    const Node& n = g_.nodes[node];
    const bool update = WindowEndCast(n.kind, step, update_);
    if (update && point == Point::kBeforeWork) {
      return stream.Enqueue([this, b = n.bucket, step]() {
        std::unique_lock<std::mutex> lock(mu_);
        if (!gate_) {
          lock.unlock();
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          return absl::OkStatus();
        }
        if (!cv_.wait_for(lock, std::chrono::seconds(5),
                          [&] { return started_.count({b, step + 1}) > 0; })) {
          ++timeouts_;
        }
        return absl::OkStatus();
      });
    }
    if (update && point == Point::kAfterWork) {
      return stream.Enqueue([this, b = n.bucket, step]() {
        std::lock_guard<std::mutex> lock(mu_);
        update_end_[{b, step}] = seq_++;
        return absl::OkStatus();
      });
    }
    if (n.kind == NodeKind::kForward && point == Point::kBeforeWork) {
      std::set<int> buckets;
      for (int r : n.reads) buckets.insert(g_.buffers[r].bucket);
      return stream.Enqueue([this, buckets, step]() {
        std::lock_guard<std::mutex> lock(mu_);
        for (int b : buckets) {
          if (started_.insert({b, step}).second) forward_start_[{b, step}] = seq_;
        }
        ++seq_;
        cv_.notify_all();
        return absl::OkStatus();
      });
    }
    return absl::OkStatus();
  }

  const StepGraph& g_;
  const int update_;
  const bool gate_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t seq_ = 0;
  int timeouts_ = 0;
  std::set<std::pair<int, int64_t>> started_;
  std::map<std::pair<int, int64_t>, uint64_t> forward_start_, update_end_;
};

// The overlap is real: with d > 0 the forward of the step after a window's
// end starts while that window's host update still runs; with d = 0 it
// waits for it.
TEST(ZenFlowExecTest, HostUpdateOverlapsTheNextForwardOnlyWithStaleness) {
  constexpr int kUpdate = 3, kSteps = 7;  // windows end at steps 2 and 5
  for (int select : {3, 6}) {
    for (int d : {0, 1, 2}) {
      SCOPED_TRACE(absl::StrCat("select ", select, ", staleness ", d));
      const Policy policy = ZenFlow(select, kUpdate, 0.25, d);
      auto group = CreateInprocGroup(1);
      ASSERT_TRUE(group.ok());
      auto graph = BuildStepGraph(*ModelPreset("micro"), policy, 1);
      ASSERT_TRUE(graph.ok()) << graph.status();
      OverlapProbe probe(*graph, kUpdate, /*gate=*/d > 0);
      ExecutorOptions o;
      o.observer = &probe;
      o.optimizer_driver = ZenFlowDriverFactory(ops::AdamWConfig{});
      auto exec = Executor::Create(*graph, *group->device, *group->comms[0], o);
      ASSERT_TRUE(exec.ok()) << exec.status();
      ASSERT_TRUE((*exec)->InitParameters([](const ParamSlot& p, float* out) {
        for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
      }).ok());
      StepCallbacks cb;
      cb.compute = [](const ComputeContext& ctx) -> Status {
        if (ctx.kind != NodeKind::kBackward) return absl::OkStatus();
        std::vector<TensorView> grads = ctx.grads;
        const int64_t step = ctx.step;
        return ctx.stream->Enqueue([grads, step]() {
          for (const TensorView& g : grads) {
            float* d = static_cast<float*>(g.data);
            for (int64_t i = 0; i < g.param->numel; ++i) d[i] = Grad(step, *g.param, i);
          }
          return absl::OkStatus();
        });
      };
      for (int s = 0; s < kSteps; ++s) ASSERT_TRUE((*exec)->Step(cb).ok());
      ASSERT_TRUE((*exec)->Synchronize().ok());
      EXPECT_EQ(probe.timeouts_, 0);
      int checked = 0;
      for (const auto& [key, end] : probe.update_end_) {
        const auto [b, e] = key;
        const auto start = probe.forward_start_.find({b, e + 1});
        if (start == probe.forward_start_.end()) continue;  // past the last step
        ++checked;
        if (d > 0) {
          EXPECT_LT(start->second, end) << "bucket " << b << ", window ending at " << e;
        } else {
          EXPECT_GT(start->second, end) << "bucket " << b << ", window ending at " << e;
        }
      }
      EXPECT_GE(checked, 2 * 2);  // two windows, at least two buckets
    }
  }
}

// A host update that fails fails the executor's streams and still
// releases the work that waits for it: Synchronize returns the error,
// nothing hangs, and no forward runs on weights the update should have
// brought (d = 0 and 2, 2 ranks). The failure is injected at the update's
// "before work" point: as host work of the update (it fails when it runs)
// or at issue (the observer's call returns it, so Step does too).
class FailingUpdate : public NodeObserver {
 public:
  FailingUpdate(const StepGraph& g, int update, bool at_issue)
      : g_(g), update_(update), at_issue_(at_issue) {}
  Status Observe(int node, int64_t step, Point point, Stream& stream) override {
    const Node& n = g_.nodes[node];
    if (!WindowEndCast(n.kind, step, update_) || step < update_ ||
        point != Point::kBeforeWork) {
      return absl::OkStatus();
    }
    const Status injected = absl::InternalError("injected update failure");
    if (at_issue_) return injected;
    return stream.Enqueue([injected]() { return injected; });
  }

 private:
  const StepGraph& g_;
  const int update_;
  const bool at_issue_;
};

TEST(ZenFlowExecTest, AFailingUpdateFailsTheStepsWithoutAHang) {
  constexpr int kUpdate = 3, kFailsAt = 5;  // the update of window 1
  for (bool at_issue : {false, true}) {
    for (int d : {0, 2}) {
      SCOPED_TRACE(absl::StrCat(at_issue ? "at issue" : "as host work", ", staleness ", d));
      const Policy policy = ZenFlow(kUpdate, kUpdate, 0.25, d);
      constexpr int kRanks = 2;
      auto group = CreateInprocGroup(kRanks);
      ASSERT_TRUE(group.ok());
      std::vector<Status> sync(kRanks);
      std::vector<int64_t> last_forward(kRanks, -1);
      RunRanks(kRanks, [&](int r) {
        auto graph = BuildStepGraph(*ModelPreset("micro"), policy, kRanks);
        ASSERT_TRUE(graph.ok()) << graph.status();
        FailingUpdate fail(*graph, kUpdate, at_issue);
        ExecutorOptions o;
        o.observer = &fail;
        o.optimizer_driver = ZenFlowDriverFactory(ops::AdamWConfig{});
        auto exec = Executor::Create(*graph, *group->device, *group->comms[r], o);
        ASSERT_TRUE(exec.ok()) << exec.status();
        ASSERT_TRUE((*exec)->InitParameters([](const ParamSlot& p, float* out) {
          for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
        }).ok());
        std::atomic<int64_t>* seen = reinterpret_cast<std::atomic<int64_t>*>(&last_forward[r]);
        StepCallbacks cb;
        cb.compute = [seen](const ComputeContext& ctx) -> Status {
          if (ctx.kind != NodeKind::kForward) return absl::OkStatus();
          const int64_t step = ctx.step;
          return ctx.stream->Enqueue([seen, step]() {
            int64_t was = seen->load();
            while (was < step && !seen->compare_exchange_weak(was, step)) {
            }
            return absl::OkStatus();
          });
        };
        for (int s = 0; s < 9; ++s) {
          if (!(*exec)->Step(cb).ok()) break;
        }
        sync[r] = (*exec)->Synchronize();
        if (!sync[r].ok()) group->comms[r]->Abort();
      });
      // Every rank fails; a rank whose streams saw the other rank's abort
      // first may report that instead.
      int injected = 0;
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_FALSE(sync[r].ok()) << "rank " << r;
        injected += std::string(sync[r].message()).find("injected update failure") !=
                    std::string::npos;
        // The forward of step kFailsAt + 1 + d needs the failed update.
        EXPECT_LT(last_forward[r], kFailsAt + 1 + d) << "rank " << r;
        // As host work the update fails after step kFailsAt's backward (its
        // OPT), so that step's forward ran; at issue every stream fails at
        // once and earlier queued work may be skipped too.
        if (!at_issue) {
          EXPECT_GE(last_forward[r], kFailsAt) << "rank " << r << ": ran too little to test";
        }
      }
      EXPECT_GE(injected, 1) << sync[0] << " / " << sync[1];
    }
  }
}

TEST(ZenFlowExecTest, BadKnobsAreRefused) {
  Policy p = ZenFlow(3, 2, 0.25);  // select not a multiple of update
  Status st = ValidatePolicy(p);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("zenflow_select_interval"), absl::string_view::npos) << st;
  EXPECT_FALSE(BuildStepGraph(*ModelPreset("micro"), p, 2).ok());
  p = ZenFlow(kAutoInterval, 3, 0.25);  // auto select = update: fine
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p = ZenFlow(4, kAutoInterval, 0.25);  // 4 is a multiple of auto (4)
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p = ZenFlow(6, kAutoInterval, 0.25);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicy(p)));
  p = ZenFlow(4, 2, 0.25, 2);  // staleness must stay below update_interval
  st = ValidatePolicy(p);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("zenflow_staleness"), absl::string_view::npos) << st;
  EXPECT_FALSE(BuildStepGraph(*ModelPreset("micro"), p, 2).ok());
  p = ZenFlow(4, 2, 0.25, -2);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicy(p)));
  p = ZenFlow(4, 2, 0.25, kAutoInterval);  // auto: 1
  EXPECT_TRUE(ValidatePolicy(p).ok());
  EXPECT_EQ(ResolveZenFlow(p).staleness, 1);
}

// The executed order of the zenflow preset (as ExecutorTest checks it for
// the others), staleness 0 and auto (3, update 4), with
// one exception: each bucket's CAST (the window's host update and cast)
// runs on the host-update stream, outside the step barrier. It is left out
// of its graph stream's FIFO and of the steps' no-overlap check; instead
// the CASTs run in issue order, every graph edge (OPT -> CAST included)
// holds, and an update's CAST ends before the H2D of step e + 1 + d that
// uploads what it wrote starts.
TEST(ZenFlowExecTest, ExecutedOrderRespectsEveryEdge) {
  const ModelSpec micro = *ModelPreset("micro");
  auto Micro = [&micro]() { return micro; };
  constexpr int kRanks = 2, kSteps = 12;  // windows end at 3, 7, 11
  for (int staleness : {0, kAutoInterval}) {
    Policy p = *PolicyPreset("zenflow");
    p.param_dtype = DataType::kF32;
    p.micro_steps = 2;
    p.zenflow_staleness = staleness;
    const ZenFlowIntervals z = ResolveZenFlow(p);
    const std::string name = absl::StrCat("zenflow, staleness ", z.staleness);
    ExecutorOptions o;
    o.trace = true;
    o.max_delay_us = 200;
    o.optimizer_driver = ZenFlowDriverFactory(ops::AdamWConfig{});
    const testing::ToyRun r = testing::TrainToy(Micro(), p, kRanks, kSteps, o,
                                                testing::CastBy::kExecutor,
                              /*compare=*/false);
    ASSERT_EQ(r.error, "") << name;
    auto graph = BuildStepGraph(Micro(), p, kRanks);
    ASSERT_TRUE(graph.ok());
    const int nn = static_cast<int>(graph->nodes.size());
    auto is_cast = [&](int i) { return graph->nodes[i].kind == NodeKind::kCast; };
    int uploads_checked = 0;
    for (int rank = 0; rank < kRanks; ++rank) {
      const auto& trace = r.traces[rank];
      ASSERT_EQ(trace.size(), static_cast<size_t>(nn) * kSteps) << name;
      std::vector<std::vector<TraceRecord>> at(kSteps, std::vector<TraceRecord>(nn));
      for (const TraceRecord& t : trace) at[t.step][t.node] = t;
      const TraceRecord* last_cast = nullptr;
      for (int s = 0; s < kSteps; ++s) {
        for (const GraphEdge& e : graph->edges) {
          EXPECT_LT(at[s][e.from].end, at[s][e.to].start)
              << name << " step " << s << ": " << graph->nodes[e.from].name
              << " -> " << graph->nodes[e.to].name;
        }
        std::vector<int> last(graph->num_streams, -1);
        for (int i = 0; i < nn; ++i) {
          const Node& n = graph->nodes[i];
          if (is_cast(i)) {
            // The host-update stream: issue order, across steps too.
            if (last_cast != nullptr) {
              EXPECT_LT(last_cast->end, at[s][i].start) << name << " " << n.name;
            }
            last_cast = &at[s][i];
            // After its OPT (the host stream's node before it).
            ASSERT_GT(i, 0);
            const Node& opt = graph->nodes[i - 1];
            ASSERT_EQ(opt.kind, NodeKind::kOptimizer) << n.name;
            ASSERT_EQ(opt.bucket, n.bucket) << n.name;
            EXPECT_LT(at[s][i - 1].end, at[s][i].start) << name << " step " << s;
            // Before the H2D that uploads the window's update.
            const int64_t u = s + 1 + z.staleness;
            if ((s + 1) % z.update != 0 || u >= kSteps) continue;
            for (int h = 0; h < nn; ++h) {
              const Node& h2d = graph->nodes[h];
              if (h2d.kind != NodeKind::kH2D || h2d.bucket != n.bucket) continue;
              EXPECT_LT(at[s][i].end, at[u][h].start)
                  << name << ": " << n.name << " of step " << s << ", H2D of step " << u;
              ++uploads_checked;
            }
            continue;
          }
          int& l = last[n.stream.index()];
          if (l >= 0) {
            EXPECT_LT(at[s][l].end, at[s][i].start) << name << " " << n.name;
          }
          l = i;
        }
        // Steps do not overlap (the CASTs aside).
        if (s > 0) {
          uint64_t prev_end = 0, start = ~uint64_t{0};
          for (int i = 0; i < nn; ++i) {
            if (is_cast(i)) continue;
            prev_end = std::max(prev_end, at[s - 1][i].end);
            start = std::min(start, at[s][i].start);
          }
          EXPECT_LT(prev_end, start) << name << " step " << s;
        }
      }
    }
    // Two ranks, at least two buckets, windows ending at 3 and 7 (and 11
    // with staleness 0).
    EXPECT_GE(uploads_checked, kRanks * 2 * 2) << name;
  }
}

// The step trace of a zenflow run: its CAST on the host-update track
// (testing::CheckStepTraceOfToyRun, as //scheduler:step_trace_test checks
// the other presets).
TEST(ZenFlowExecTest, StepTraceRecordsTheHostUpdateTrack) {
  ExecutorOptions o;
  o.optimizer_driver = ZenFlowDriverFactory(ops::AdamWConfig{});
  testing::CheckStepTraceOfToyRun("zenflow", o);
}

}  // namespace
}  // namespace baton::optim
