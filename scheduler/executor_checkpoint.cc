// Executor::Save, WaitForSave and Load (scheduler/checkpoint.h).
#include <chrono>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/checkpoint_io.h"
#include "baton/scheduler/checkpoint_plan.h"
#include "baton/scheduler/checkpoint_saver.h"
#include "baton/scheduler/executor.h"

namespace baton::scheduler {

Status Executor::CheckpointAllowed(const char* call) const {
  if (in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("executor: ", call, " inside a step; call it between steps"));
  }
  // Pipeline stages and tensor slices save and load their shards
  // (scheduler/checkpoint_plan.h); Create refused the graphs the executor
  // does not run (context parallelism, a whole-model tensor layout).
  if (driver_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "executor: ", call, ": policy ", graph_.policy.name,
        " runs an optimizer driver (ZenFlow) whose state (column selections, the device "
        "state of the selected columns, host accumulators) checkpoints do not capture yet; "
        "checkpoint a run under a policy without zenflow"));
  }
  if (Status s = CheckCheckpointable(graph_.policy); !s.ok()) {
    return Status(s.code(), absl::StrCat("executor: ", call, ": ", s.message()));
  }
  return absl::OkStatus();
}

Status Executor::Save(const SaveOptions& options) {
  const auto called = std::chrono::steady_clock::now();
  BATON_RETURN_IF_ERROR(CheckpointAllowed("Save"));
  if (options.root.empty()) {
    return absl::InvalidArgumentError("executor: Save needs SaveOptions::root (a directory)");
  }
  if (!saver_) {
    BATON_ASSIGN_OR_RETURN(saver_, CheckpointSaver::Create(graph_, device_, rank()));
  }
  // The state is final once the last step's streams are done (their end
  // events); before the first step it was written synchronously.
  std::vector<Event*> after;
  if (step_ > 0) {
    for (auto& e : end_events_) after.push_back(e.get());
  }
  BATON_RETURN_IF_ERROR(saver_->Issue(options, step_, comm_, after,
                                      [this](int b) { return BufferData(b); }, called));
  save_pending_ = true;
  return absl::OkStatus();
}

Status Executor::WaitForSave(SaveStats* stats) {
  if (!saver_) {
    if (stats != nullptr) *stats = SaveStats{};
    return absl::OkStatus();
  }
  return saver_->Wait(stats);
}

Event* Executor::SaveCopiesEvent() { return saver_ ? &saver_->copied() : nullptr; }

StatusOr<CheckpointInfo> Executor::Load(const std::string& path, const LoadOptions& options) {
  BATON_RETURN_IF_ERROR(CheckpointAllowed("Load"));
  CheckpointFs& fs = options.fs != nullptr ? *options.fs : PosixFs();
  if (saver_) {
    // Our own save may be writing (perhaps into `path`): let it finish. Its
    // error, if any, stays for the next Save / WaitForSave.
    (void)saver_->Wait(nullptr);
  }
  BATON_RETURN_IF_ERROR(Synchronize());
  BATON_ASSIGN_OR_RETURN(const std::string dir, FindCheckpoint(fs, path));
  BATON_ASSIGN_OR_RETURN(const Manifest m, ReadManifest(fs, dir));
  auto in_dir = [&](const Status& st) {
    return Status(st.code(), absl::StrCat("checkpoint ", dir, ": ", st.message()));
  };
  auto pieces = PlanRankLoad(m, graph_, rank());
  if (!pieces.ok()) return in_dir(pieces.status());
  // Bucket by bucket (host memory for one bucket's shards at a time):
  // read its pieces into zeroed host shards (padding stays zero), copy
  // them into the master and moment buffers.
  const BufferRole roles[kNumStateTensors] = {BufferRole::kMaster, BufferRole::kMoment1,
                                              BufferRole::kMoment2};
  const auto& buckets = graph_.layout.buckets;
  Stream& s = compute_stream();
  std::vector<float> host[kNumStateTensors];
  for (size_t b = 0; b < buckets.size(); ++b) {
    // A pipeline stage holds its own buckets only (PlanRankLoad reads none
    // of the others).
    if (BucketBuffer(static_cast<int>(b), BufferRole::kMaster) < 0 &&
        BucketBuffer(static_cast<int>(b), BufferRole::kMoment1) < 0 &&
        BucketBuffer(static_cast<int>(b), BufferRole::kMoment2) < 0 && graph_.parallel()) {
      continue;
    }
    std::vector<LoadPiece> mine;
    for (const LoadPiece& p : *pieces) {
      if (p.bucket == static_cast<int>(b)) mine.push_back(p);
    }
    for (auto& v : host) v.assign(buckets[b].shard_numel, 0.0f);
    BATON_RETURN_IF_ERROR(ReadPieces(fs, dir, m, mine, [&](const LoadPiece& p) {
      return reinterpret_cast<char*>(host[static_cast<int>(p.tensor)].data() + p.shard_elem);
    }));
    for (int t = 0; t < kNumStateTensors; ++t) {
      const int buf = BucketBuffer(static_cast<int>(b), roles[t]);
      if (buf < 0 || graph_.buffers[buf].numel != static_cast<int64_t>(host[t].size())) {
        return absl::InternalError(absl::StrCat("executor: Load: no ",
                                                StateTensorName(static_cast<StateTensor>(t)),
                                                " shard of bucket ", buckets[b].name));
      }
      BATON_RETURN_IF_ERROR(
          s.MemcpyAsync(BufferData(buf), host[t].data(), host[t].size() * sizeof(float)));
    }
    BATON_RETURN_IF_ERROR(s.Synchronize());  // `host` is read until here
  }
  BATON_RETURN_IF_ERROR(CastMasters());
  step_ = m.header.step;
  CheckpointInfo info;
  info.dir = dir;
  info.step = m.header.step;
  info.data_position = m.header.data_position;
  info.model = m.header.model;
  info.policy_name = m.header.policy_name;
  info.world_size = m.header.world_size;
  info.mesh = m.header.mesh;
  return info;
}

}  // namespace baton::scheduler
