// Test support for checkpoints (scheduler/checkpoint.h): toy-model jobs on
// inproc ranks that start from the initial values or a checkpoint, train,
// and save; and a comparison of two checkpoints tensor by tensor. Used by
// //scheduler:checkpoint_test and the kill-during-save trials in tests/.
#ifndef BATON_SCHEDULER_TESTING_CHECKPOINT_TOY_H_
#define BATON_SCHEDULER_TESTING_CHECKPOINT_TOY_H_

#include <string>
#include <vector>

#include "baton/scheduler/checkpoint.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::scheduler::testing {

// The "micro" model preset; a policy preset in fp32 (shard_group >= 0
// overrides the preset's).
ModelSpec Micro();
Policy Fp32Preset(const std::string& name, int shard_group = -1);

// The toy model's callbacks plus moments that follow the gradient exactly
// (m1 = m1 / 2 + g, m2 += g * g with g = G * grad_scale: small dyadic
// numbers), so the moments a checkpoint carries are checked too.
StepCallbacks WithMoments(StepCallbacks cb);

struct ToyRunSpec {
  ModelSpec spec = Micro();
  Policy policy;
  int ranks = 1;
  std::string load;       // "": InitParameters; else Load(load)
  int steps = 0;
  std::string save_root;  // "": no save at the end; else Save + WaitForSave
  CheckpointFs* fs = nullptr;                    // for Load and Save
  const ToyModel::Reference* compare = nullptr;  // after the steps
};

// Runs a toy job (data position saved: steps issued x 100); "" when every
// rank succeeded (and matched `compare`), else the error of the first rank
// to fail (its abort fails the others: theirs are consequences).
// `stats`: each rank's SaveStats.
std::string RunToy(const ToyRunSpec& job, std::vector<SaveStats>* stats = nullptr);

// The unsharded reference at the initial values, and after `steps` more
// steps of `ranks` ranks.
ToyModel::Reference Initial(const ModelSpec& spec = Micro());
ToyModel::Reference Advance(ToyModel::Reference ref, int ranks, int steps,
                            const ModelSpec& spec = Micro());

// Every state tensor of two checkpoints (paths as Load takes them),
// element by element; "" when all bits agree, else what differs.
std::string CompareCheckpoints(const std::string& a, const std::string& b);

}  // namespace baton::scheduler::testing

#endif  // BATON_SCHEDULER_TESTING_CHECKPOINT_TOY_H_
