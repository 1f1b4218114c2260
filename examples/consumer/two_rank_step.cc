// A trainer's program outside the baton project: it includes only the
// installed API ("baton/..."), links //:baton (Bazel) or baton::baton (CMake)
// and drives one training step of two inproc ranks through the session
// hooks, with its own compute and optimizer:
//   backward writes gradient (rank + 1) into every element, so the reduced
//   gradient the optimizer sees is 1 + 2 = 3 everywhere.
//
//   two_rank_step [--expect-backends=inproc[,ucx][,nccl]] [--version]
//
// --expect-backends: the backends this program must have linked (exactly);
// the others must be refused with Unavailable naming the target to link.
// Prints one line per rank and "ok"; exit 0 on success, 1 on a failed
// check, 2 on bad usage.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "baton/comm/factory.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/runtime/version.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/session.h"
#include "baton/scheduler/step_graph.h"

namespace {

using baton::DataType;
using baton::Status;
using baton::scheduler::OptimizerContext;
using baton::scheduler::Session;
using baton::scheduler::UnitViews;

constexpr int kRanks = 2;

// Fills every gradient of `v` with `value` (or adds it where the plan says
// accumulate), in stream order.
Status EnqueueGrads(const UnitViews& v, float value) {
  for (size_t i = 0; i < v.grads.size(); ++i) {
    const baton::scheduler::TensorView g = v.grads[i];
    const bool acc = v.grad_accumulate[i];
    if (g.dtype != DataType::kF32) {
      return absl::InvalidArgumentError("consumer: expects f32 gradients");
    }
    BATON_RETURN_IF_ERROR(v.stream->Enqueue([g, acc, value]() -> Status {
      float* p = static_cast<float*>(g.data);
      for (int64_t k = 0; k < g.param->numel; ++k) p[k] = acc ? p[k] + value : value;
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// One rank: build its graph (kept alive for the session), run one step.
Status RunRank(int rank, baton::Device& device, baton::Communicator& comm,
               std::atomic<int>& buckets, std::atomic<int>& bad) {
  BATON_ASSIGN_OR_RETURN(auto spec, baton::scheduler::ModelPreset("micro"));
  BATON_ASSIGN_OR_RETURN(auto policy, baton::scheduler::PolicyPreset("baton"));
  policy.param_dtype = DataType::kF32;
  policy.micro_steps = 1;
  BATON_ASSIGN_OR_RETURN(auto graph,
                         baton::scheduler::BuildStepGraph(spec, policy, kRanks));
  BATON_ASSIGN_OR_RETURN(auto session, Session::Create(graph, device, comm));
  BATON_RETURN_IF_ERROR(session->executor().InitParameters(
      [](const baton::scheduler::ParamSlot& slot, float* out) {
        std::fill(out, out + slot.numel, 1.0f);
      }));
  const int units = static_cast<int>(graph.layout.units.size());
  BATON_RETURN_IF_ERROR(session->BeginStep());
  for (int u = 0; u < units; ++u) {
    BATON_ASSIGN_OR_RETURN(UnitViews v, session->PreForward(u));
    BATON_RETURN_IF_ERROR(session->PostForward(u));  // forward: nothing to do
  }
  for (int u = units - 1; u >= 0; --u) {
    BATON_ASSIGN_OR_RETURN(UnitViews v, session->PreBackward(u));
    BATON_RETURN_IF_ERROR(EnqueueGrads(v, static_cast<float>(rank + 1)));
    BATON_RETURN_IF_ERROR(session->PostBackward(u));
  }
  BATON_RETURN_IF_ERROR(session->FinishStep(
      [&buckets, &bad](const OptimizerContext& ctx) -> Status {
        if (ctx.grad_dtype != DataType::kF32) {
          return absl::InvalidArgumentError("consumer: expects f32 reduce");
        }
        return ctx.stream->Enqueue([ctx, &buckets, &bad]() -> Status {
          const float* g = static_cast<const float*>(ctx.grad);
          for (int64_t k = 0; k < ctx.shard_numel; ++k) {
            if (g[k] != 3.0f) ++bad;
            ctx.master[k] -= 0.1f * static_cast<float>(ctx.grad_scale) * g[k];
          }
          ++buckets;
          return absl::OkStatus();
        });
      }));
  return session->executor().Synchronize();
}

int Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok:  " : "FAIL:", what.c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> expect = {"inproc"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version") {
      std::printf("two_rank_step (baton %s)\n", BATON_VERSION);
      return 0;
    } else if (a.rfind("--expect-backends=", 0) == 0) {
      expect = absl::StrSplit(a.substr(std::strlen("--expect-backends=")), ',');
      std::sort(expect.begin() + 1, expect.end());
    } else {
      std::fprintf(stderr, "two_rank_step: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  int failures = 0;
  auto device = baton::CreateHostDevice();
  if (!device.ok()) return Check(false, device.status().ToString());

  // The backends linked in, and the message for one that is not.
  auto built = baton::BuiltBackends();
  std::sort(built.begin() + 1, built.end());
  failures += Check(built == expect, "backends linked: " + absl::StrJoin(built, ","));
  for (const char* b : {"ucx", "nccl"}) {
    if (std::find(built.begin(), built.end(), b) != built.end()) continue;
    baton::CommConfig c;
    c.backend = b;
    c.device = device->get();
    auto comm = baton::CreateCommunicator(c);
    const std::string target = absl::StrCat("//:baton_", b);
    failures += Check(!comm.ok() && comm.status().code() == absl::StatusCode::kUnavailable &&
                          comm.status().message().find(target) != std::string::npos,
                      absl::StrCat("unlinked ", b, ": ", comm.status().ToString()));
  }

  baton::CommConfig base;
  base.device = device->get();
  auto comms = baton::CreateInprocGroup(kRanks, base);
  if (!comms.ok()) return Check(false, comms.status().ToString());
  std::atomic<int> buckets{0}, bad{0};
  std::vector<Status> status(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      status[r] = RunRank(r, **device, *(*comms)[r], buckets, bad);
      if (!status[r].ok()) (*comms)[r]->Abort();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    failures += Check(status[r].ok(), absl::StrCat("rank ", r, " step: ", status[r].ToString()));
  }
  failures += Check(buckets > 0 && bad == 0,
                    absl::StrCat(buckets.load(), " optimizer buckets, ", bad.load(),
                                 " gradient elements != 3"));
  std::printf("%s (baton %s)\n", failures == 0 ? "ok" : "FAILED", BATON_VERSION);
  return failures == 0 ? 0 : 1;
}
