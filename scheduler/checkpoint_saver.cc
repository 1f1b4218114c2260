#include "baton/scheduler/checkpoint_saver.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/offload.h"
#include "baton/scheduler/policy_file.h"
#include "baton/scheduler/streams.h"

namespace baton::scheduler {
namespace {

constexpr size_t kNonceBytes = 64;  // the nonce word, padded (staging alignment)

uint64_t DrawNonce() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  return ((hi << 32) ^ lo ^ (t * 0x9E3779B97F4A7C15ull)) | 1;  // never 0
}

}  // namespace

StatusOr<std::unique_ptr<CheckpointSaver>> CheckpointSaver::Create(const StepGraph& graph,
                                                                   Device& device, int rank) {
  std::unique_ptr<CheckpointSaver> s(new CheckpointSaver(graph, rank));
  s->params_ = CheckpointParamsOf(graph);
  BATON_ASSIGN_OR_RETURN(s->plan_, PlanRankSave(graph, rank, s->params_));
  StreamOptions so;
  so.name = absl::StrCat("checkpoint.r", rank);
  BATON_ASSIGN_OR_RETURN(s->stream_, device.CreateStream(so));
  BATON_ASSIGN_OR_RETURN(s->copied_, device.CreateEvent());
  BATON_ASSIGN_OR_RETURN(s->staging_, AllocateHostState(device, kNonceBytes + s->plan_.staging_bytes));
  BATON_ASSIGN_OR_RETURN(s->nonce_dev_, device.Allocate(sizeof(uint64_t)));
  s->writer_ = std::make_unique<SaveWriter>();
  return s;
}

CheckpointSaver::~CheckpointSaver() {
  writer_.reset();  // finishes the job (it waits on copied_ through stream_)
  if (stream_) (void)stream_->Synchronize();
}

Status CheckpointSaver::Issue(const SaveOptions& options, int64_t step, Communicator& comm,
                              const std::vector<Event*>& after,
                              const std::function<void*(int)>& buffer,
                              std::chrono::steady_clock::time_point called) {
  BATON_RETURN_IF_ERROR(writer_->Wait(nullptr));  // the staging is free again
  Stream& s = *stream_;
  char* staging = static_cast<char*>(staging_.data());
  auto* nonce = reinterpret_cast<uint64_t*>(staging);
  *nonce = comm.rank() == 0 ? DrawNonce() : 0;
  CollectiveOptions co;
  co.tag = kCheckpointTag;
  BATON_RETURN_IF_ERROR(s.MemcpyAsync(nonce_dev_.data(), nonce, sizeof(uint64_t)));
  BATON_RETURN_IF_ERROR(comm.Broadcast(nonce_dev_.data(), nonce_dev_.data(), 2, DataType::kI32,
                                       0, s, co));
  BATON_RETURN_IF_ERROR(s.MemcpyAsync(nonce, nonce_dev_.data(), sizeof(uint64_t)));
  for (Event* e : after) BATON_RETURN_IF_ERROR(s.Wait(*e));
  for (const SaveSpan& span : plan_.spans) {
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(staging + kNonceBytes + span.staging_offset,
                                        static_cast<const char*>(buffer(span.buffer)) + span.first * 4,
                                        static_cast<size_t>(span.count) * 4));
  }
  BATON_RETURN_IF_ERROR(copied_->Record(s));
  issued_ = true;

  SaveJob job;
  job.fs = options.fs != nullptr ? options.fs : &PosixFs();
  job.root = options.root;
  CheckpointHeader& h = job.header;
  h.step = step;
  h.data_position = options.data_position;
  h.model = graph_.layout.spec.name;
  h.policy_name = graph_.policy.name;
  h.policy_json = PolicyToJson(graph_.policy);
  h.mesh = graph_.mesh.sizes();
  h.world_size = graph_.world_size();
  h.param_dtype = DataTypeName(graph_.policy.param_dtype);
  h.params = params_;
  job.rank = rank_;
  job.plan = &plan_;
  job.staging = staging + kNonceBytes;
  job.nonce = nonce;
  Event* copied = copied_.get();
  job.wait_copies = [copied]() { return copied->Synchronize(); };
  job.issued = called;
  SaveStats stats;
  stats.step = step;
  stats.issue_ms = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - called).count();
  writer_->Start(std::move(job), stats);
  return absl::OkStatus();
}

Status CheckpointSaver::WaitCopies() {
  if (!issued_) return absl::OkStatus();
  return copied_->Synchronize();
}

Status CheckpointSaver::Wait(SaveStats* stats) { return writer_->Wait(stats); }

}  // namespace baton::scheduler
