// Checkpoints of the training state an executor owns: Executor::Save /
// WaitForSave / Load (scheduler/executor.h), Session's of the same names.
// Users' guide: docs/checkpoints.md.
//
// What is saved, per parameter: the fp32 master and both Adam moments
// (every element once over all ranks), and the step count (the executor's
// steps issued, which AdamW's bias correction reads), the data position
// the trainer reports, the model, the policy and the mesh. Nothing else
// carries from one step to the next: the parameter-dtype shards are the
// masters rounded (Load casts them again, as InitParameters does), the
// gradient shards and every arena buffer are rewritten by each step. So a
// run resumed from a checkpoint of step k computes what the uninterrupted
// run computes from step k on, bit for bit, on the same layout.
//
// Save (collective: every rank calls it between the same two steps):
//   1. rank 0 draws the save's nonce, broadcast on the executor's
//      communicator (tag kCheckpointTag) on the checkpoint stream;
//   2. that stream waits for the last step's streams (events), copies this
//      rank's share of the state into host staging (pinned on CUDA; 12
//      bytes per element the rank writes, allocated by the first Save and
//      kept) and records the "copied" event; Save returns: the host never
//      waits for the copies;
//   3. in the next step, every node that writes a master or a moment
//      (the optimizer) first waits on "copied" on its stream (an event
//      wait, no host blocking): the forward and backward overlap the
//      copies, and no shard is overwritten before it was copied;
//   4. the executor's writer thread waits for "copied" and writes the
//      files (scheduler/checkpoint_io.h: temporary names, fsync, rename,
//      the manifest last, by the last rank to finish) while training goes
//      on.
// One save at a time: a Save while the previous one is still being written
// blocks the host until it is done (SaveStats::issue_ms shows it). A save
// that failed fails every later Save and WaitForSave of that executor with
// its error (the run should stop; its earlier checkpoints are intact).
// WaitForSave blocks until this rank's writer is done; the checkpoint is
// complete once every rank's WaitForSave returned OK.
//
// Load (not collective: each rank reads what its shards need) fills the
// masters and moments from the checkpoint at `path` (a checkpoint
// directory, or a root whose newest complete step-N is taken), for this
// executor's layout whatever layout saved it (another rank count, policy
// or mesh, pipeline stages and tensor slices included: a stage's ranks
// save and load its buckets, a tensor rank's slice maps to ranges of the
// whole parameters, scheduler/checkpoint_plan.h; the parameters are
// matched by name and whole shape), casts the
// shards and sets the step count. Every block read is checked against its
// CRC-32C: DataLoss naming the file on a mismatch or a truncated file.
// Blocks the host until done; holds one bucket's shards in host memory at
// a time.
//
// Not supported: an executor with an optimizer driver (ZenFlow;
// FailedPrecondition naming the policy): its state (column selections,
// the packed device state of the selected columns, the host accumulators,
// an update in flight) lives in the driver, which has no hook to save it
// yet. To add it: OptimizerDriver
// gains SaveState / LoadState writing extra tensor kinds of the manifest,
// saved at an update boundary.
//
// Figures and guarantees: docs/checkpoints.md.
#ifndef BATON_SCHEDULER_CHECKPOINT_H_
#define BATON_SCHEDULER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint_fs.h"
#include "baton/scheduler/mesh.h"
#include "baton/scheduler/policy.h"

namespace baton::scheduler {

struct SaveOptions {
  // The checkpoint goes to root/step-N, N = the steps issued so far.
  std::string root;
  // The trainer's position in its data (e.g. sequences consumed), stored
  // in the manifest and returned by Load.
  int64_t data_position = 0;
  // Null: the real file system (PosixFs()). Not owned; must outlive the
  // save (until WaitForSave or the executor's end).
  CheckpointFs* fs = nullptr;
};

struct LoadOptions {
  CheckpointFs* fs = nullptr;  // null: PosixFs()
};

// What Load found.
struct CheckpointInfo {
  std::string dir;  // the checkpoint directory read
  int64_t step = 0;
  int64_t data_position = 0;
  std::string model;
  std::string policy_name;
  int world_size = 0;
  MeshSizes mesh;
};

// Figures of one save on one rank (milliseconds from the Save call).
struct SaveStats {
  int64_t step = -1;
  std::string dir;         // root/step-N
  int64_t bytes = 0;       // this rank's data file
  double issue_ms = 0;     // host time inside Save
  double copied_ms = 0;    // when the copies to staging were done
  double written_ms = 0;   // when the data file and part were durable
  double done_ms = 0;      // when this rank's writer finished (commit included)
  double writer_cpu_ms = 0;  // CPU time of the writer thread (CRCs, copies, syscalls)
  bool committed = false;  // this rank wrote the manifest
};

// OK when checkpoints capture all the state `policy` keeps; otherwise
// FailedPrecondition naming what they do not capture yet (ZenFlow's driver
// state, 8-bit AdamW moments, LoRA's frozen and NF4 base buckets).
// Executor::Save / Load refuse such a run, and a trainer can ask before
// training.
[[nodiscard]] Status CheckCheckpointable(const Policy& policy);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_H_
