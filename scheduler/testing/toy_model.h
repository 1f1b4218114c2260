// Test support for the scheduler (and the packages above it that drive the
// executor): inproc ranks as threads, and a toy
// "model" whose compute callbacks are deterministic and exact, with an
// unsharded reference, so that a sharded run can be compared bit for bit.
//
// Toy math, per rank r, micro-step m, unit u (p = the parameter as the
// trainer sees it, in the parameter dtype):
//   forward   act[r][m][u] = (sum over its params and elements of
//             floor(4 p)) mod 1009
//   backward  g_i = (r + 1) * ((7 i + u) mod 5 - 2) + (floor(4 p_i) mod 13)
//                   + (act[r][m][u] mod 7) + m
//   optimizer master_i -= 1/16 * (G_i * grad_scale), G = sum over ranks,
//             micro-steps and units that read the parameter
// Every gradient is a small integer, so sums are exact in any order and
// the sharded result must equal the reference exactly. Frozen parameters
// (LoRA's base) get no gradient and keep their values.
#ifndef BATON_SCHEDULER_TESTING_TOY_MODEL_H_
#define BATON_SCHEDULER_TESTING_TOY_MODEL_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler::testing {

// Runs body(rank) on n threads at once and joins them.
void RunRanks(int n, const std::function<void(int)>& body);

// n inproc communicators over one host device (created on n threads);
// `event_protocol`: CommConfig::inproc_event_protocol (the protocol of
// device memory, on host streams).
struct InprocGroup {
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Communicator>> comms;
};
StatusOr<InprocGroup> CreateInprocGroup(int n, bool event_protocol = false);

// Deterministic initial value of element i of a parameter.
float InitialValue(const ParamSlot& slot, int64_t i);

class ToyModel {
 public:
  // `ranks` threads share one ToyModel; the activations are per rank.
  explicit ToyModel(int ranks) : act_(ranks) {}
  // Callbacks for rank `rank` (host streams only).
  StepCallbacks Callbacks(int rank);

  // The unsharded reference: full fp32 parameters by name.
  struct Reference {
    std::map<std::string, std::vector<float>> params;
  };
  static Reference InitialReference(const ModelLayout& layout);
  // One step of `ranks` ranks with `micro_steps` micro-steps, parameters
  // seen in `param_dtype` by the compute.
  static void ReferenceStep(const ModelLayout& layout, int ranks,
                            int micro_steps, DataType param_dtype,
                            Reference& ref);
  // Compares this rank's master shards with the reference; "" when every
  // element is bit-identical, else a description of the first mismatch.
  static std::string CompareShards(Executor& executor, const Reference& ref);

 private:
  std::vector<std::map<std::pair<int, int>, int64_t>> act_;  // [rank][(m,u)]
  std::mutex mu_;
};

// Trains the toy model for `steps` steps on `ranks` inproc ranks with
// `policy` and compares every rank's shards with the unsharded reference.
// Cast modes: the executor casts (kExecutor); the optimizer writes the
// shard itself (kOptimizer, StepCallbacks::optimizer_writes_shard); or the
// flag is set but the optimizer does not write it (kNobody: must fail).
// `compare` false: only run (an optimizer driver, e.g. ZenFlow's, runs its
// own optimizer, not the toy model's).
enum class CastBy { kExecutor, kOptimizer, kNobody };
struct ToyRun {
  std::string error;  // "" when every rank matched the reference
  std::vector<std::vector<TraceRecord>> traces;  // per rank
  std::vector<std::string> orders;               // per rank: ToText()
};
ToyRun TrainToy(const ModelSpec& spec, const Policy& policy, int ranks, int steps,
                const ExecutorOptions& options = {}, CastBy cast = CastBy::kExecutor,
                bool compare = true);

}  // namespace baton::scheduler::testing

#endif  // BATON_SCHEDULER_TESTING_TOY_MODEL_H_
