// Getting every rank's flight record (comm/flight_recorder.h) to the one
// rank that writes the hang report (comm/hang_report.h), for the backends
// (not a public header).
//
// Through the store (ucx, nccl), ReportHangThroughStore on each failing
// rank:
//   1. publishes its snapshot under "<world key>/hang/state/<world rank>";
//   2. the first rank to claim "<world key>/hang/claims" is the reporter: it
//      reads every rank's snapshot, waiting up to `collect` in all for the
//      missing ones (a stalled or dead rank never publishes; it is then
//      "did not report"), analyses them, hands the whole report to the sink
//      and posts the verdict under "<world key>/hang/verdict";
//   3. every other failing rank waits for that verdict (collect plus two
//      store timeouts at most).
// Each returns its own error with "; hang report: <verdict>" appended. When
// the store cannot be reached (rank 0's process is gone) the rank writes its
// own snapshot to the sink instead ("its log") and says so in its error.
// One report per world key and store: later failures of the same job read
// the first verdict.
//
// Within a process (inproc), InProcessHangReports holds every rank's
// recorder; the first failing rank snapshots them all, writes the report
// and keeps the verdict for the others. Thread-safe.
#ifndef BATON_COMM_HANG_REPORTING_H_
#define BATON_COMM_HANG_REPORTING_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/flight_recorder.h"
#include "baton/runtime/status.h"

namespace baton {

using HangSink = std::function<void(const std::string&)>;

// Sends `text` to `sink`, or to stderr when it is empty.
void EmitHangReport(const HangSink& sink, const std::string& text);

// `own` with "; hang report: <summary>" appended (same code).
Status WithHangVerdict(const Status& own, absl::string_view summary);

struct HangStoreOptions {
  absl::Duration collect = absl::Milliseconds(500);
  absl::Duration store_timeout = absl::Seconds(1);
  HangSink sink;
};

// One failing rank's part (see above; one per rank at a time: see
// FlightRecorder::StartReport), in two steps so that a backend can
// publish its snapshot first (fast), then do slower work of its own (ucx's
// failure attribution) while the other ranks publish theirs, then conclude.
// Not thread-safe; one per failure.
class StoreHangReport {
 public:
  // `store` (may be null: the rank only logs) and `recorder` must outlive
  // this object.
  StoreHangReport(Store* store, HangStoreOptions options,
                  const FlightRecorder& recorder);
  // Snapshots the recorder and publishes it.
  void Publish();
  // Claims the report or waits for its verdict; returns `own` (the
  // failure; returned unchanged when OK) with the verdict appended.
  // Publishes first if Publish was not called.
  Status Conclude(const Status& own);
  // The verdict Conclude appended (empty before).
  const std::string& verdict() const { return verdict_; }

 private:
  Status Alone(const Status& why, const Status& own);
  Store* const store_;
  const HangStoreOptions options_;
  const FlightRecorder& recorder_;
  bool published_ = false;
  Status publish_status_;
  RankState mine_;
  std::string prefix_;
  std::string verdict_;
};

// Publish and Conclude at once, once per rank (FlightRecorder::
// StartReport): a later failure waits for the first one's verdict.
Status ReportHangThroughStore(Store* store, const HangStoreOptions& options,
                              FlightRecorder& recorder, const Status& own);

class InProcessHangReports {
 public:
  explicit InProcessHangReports(int world_size, HangSink sink)
      : sink_(std::move(sink)), recorders_(world_size) {}
  void Register(int world_rank, std::shared_ptr<FlightRecorder> recorder);
  // The first call writes the report; every call returns `own` with the
  // (first) verdict appended.
  Status Report(const Status& own);

 private:
  const HangSink sink_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<FlightRecorder>> recorders_ ABSL_GUARDED_BY(mu_);
  bool reported_ ABSL_GUARDED_BY(mu_) = false;
  std::string verdict_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton

#endif  // BATON_COMM_HANG_REPORTING_H_
