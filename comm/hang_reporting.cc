#include "baton/comm/hang_reporting.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/hang_report.h"

namespace baton {
namespace {

// The shortest wait a store call gets (to read keys already there).
constexpr absl::Duration kMinWait = absl::Milliseconds(1);

}  // namespace

void EmitHangReport(const HangSink& sink, const std::string& text) {
  if (sink) {
    sink(text);
    return;
  }
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

Status WithHangVerdict(const Status& own, absl::string_view summary) {
  return Status(own.code(),
                absl::StrCat(own.message(), "; hang report: ", summary));
}

StoreHangReport::StoreHangReport(Store* store, HangStoreOptions options,
                                 const FlightRecorder& recorder)
    : store_(store), options_(std::move(options)), recorder_(recorder) {}

void StoreHangReport::Publish() {
  published_ = true;
  mine_ = recorder_.Snapshot();
  prefix_ = absl::StrCat(recorder_.world_key(), "/hang/");
  if (store_ == nullptr) {
    publish_status_ = absl::UnavailableError("no store");
    return;
  }
  publish_status_ =
      store_->Set(absl::StrCat(prefix_, "state/", mine_.world_rank),
                  SerializeRankState(mine_), options_.store_timeout);
}

// The store is gone: this rank's records go to its log.
Status StoreHangReport::Alone(const Status& why, const Status& own) {
  const int me = mine_.world_rank;
  std::vector<std::optional<RankState>> states(mine_.world_size);
  states[me] = mine_;
  const HangVerdict v = AnalyzeHang(states);
  EmitHangReport(options_.sink,
                 FormatHangReport(states, v,
                                  absl::StrCat("rank ", me,
                                               " (the store is unreachable: ",
                                               why.message(),
                                               "; only this rank's records): ",
                                               own.message())));
  verdict_ = absl::StrCat("the store is unreachable; rank ", me,
                          "'s records are in its log");
  return WithHangVerdict(own, verdict_);
}

Status StoreHangReport::Conclude(const Status& own) {
  if (own.ok()) return own;
  if (!published_) Publish();
  if (!publish_status_.ok()) return Alone(publish_status_, own);
  const HangStoreOptions& o = options_;
  const int me = mine_.world_rank;
  StatusOr<int64_t> claim =
      store_->Add(absl::StrCat(prefix_, "claims"), 1, o.store_timeout);
  if (!claim.ok()) return Alone(claim.status(), own);
  const std::string verdict_key = absl::StrCat(prefix_, "verdict");
  if (*claim != 1) {
    StatusOr<std::string> v =
        store_->Get(verdict_key, o.collect + 2 * o.store_timeout);
    verdict_ = v.ok() ? *v
                      : absl::StrCat("no verdict from the reporting rank (",
                                     v.status().message(), ")");
    return WithHangVerdict(own, verdict_);
  }
  // The reporter: every rank's snapshot, waiting up to `collect` in all.
  std::vector<std::optional<RankState>> states(mine_.world_size);
  states[me] = mine_;
  const absl::Time until = absl::Now() + o.collect;
  std::vector<std::string> bad;
  for (int q = 0; q < mine_.world_size; ++q) {
    if (q == me) continue;
    StatusOr<std::string> text =
        store_->Get(absl::StrCat(prefix_, "state/", q),
                    std::max(kMinWait, until - absl::Now()));
    if (!text.ok()) continue;
    StatusOr<RankState> st = ParseRankState(*text);
    if (!st.ok() || st->world_rank != q) {
      bad.push_back(absl::StrCat("rank ", q, ": ",
                                 st.ok() ? "names another rank"
                                         : st.status().message()));
      continue;
    }
    states[q] = *std::move(st);
  }
  const HangVerdict v = AnalyzeHang(states);
  std::string report = FormatHangReport(
      states, v, absl::StrCat("rank ", me, ": ", own.message()));
  for (const std::string& b : bad) {
    absl::StrAppend(&report, "unreadable record of ", b, "\n");
  }
  EmitHangReport(o.sink, report);
  (void)store_->Set(verdict_key, v.summary, o.store_timeout);
  verdict_ = v.summary;
  return WithHangVerdict(own, verdict_);
}

Status ReportHangThroughStore(Store* store, const HangStoreOptions& options,
                              FlightRecorder& recorder, const Status& own) {
  if (own.ok()) return own;
  std::string verdict;
  if (!recorder.StartReport(options.collect + 6 * options.store_timeout,
                            &verdict)) {
    return WithHangVerdict(
        own, verdict.empty() ? "this rank's first failure is still reporting"
                             : verdict);
  }
  StoreHangReport r(store, options, recorder);
  r.Publish();
  Status s = r.Conclude(own);
  recorder.FinishReport(r.verdict());
  return s;
}

void InProcessHangReports::Register(int world_rank,
                                    std::shared_ptr<FlightRecorder> recorder) {
  absl::MutexLock lock(&mu_);
  if (world_rank >= 0 && world_rank < static_cast<int>(recorders_.size())) {
    recorders_[world_rank] = std::move(recorder);
  }
}

Status InProcessHangReports::Report(const Status& own) {
  if (own.ok()) return own;
  absl::MutexLock lock(&mu_);
  if (!reported_) {
    reported_ = true;
    std::vector<std::optional<RankState>> states(recorders_.size());
    for (size_t w = 0; w < recorders_.size(); ++w) {
      if (recorders_[w] != nullptr) states[w] = recorders_[w]->Snapshot();
    }
    const HangVerdict v = AnalyzeHang(states);
    verdict_ = v.summary;
    EmitHangReport(sink_, FormatHangReport(states, v, own.message()));
  }
  return WithHangVerdict(own, verdict_);
}

}  // namespace baton
