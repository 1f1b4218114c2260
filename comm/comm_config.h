// How to create a communicator (see comm/factory.h).
#ifndef BATON_COMM_COMM_CONFIG_H_
#define BATON_COMM_COMM_CONFIG_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/device.h"

namespace baton {

class FlightRecorder;  // comm/flight_recorder.h
class Store;

struct CommConfig {
  std::string backend = "inproc";
  int rank = 0;
  int size = 1;
  // The device whose memory and streams the collectives use. Not owned;
  // must outlive the communicator.
  Device* device = nullptr;
  // ucx and nccl: rendezvous through this store (not owned; used during
  // creation and destruction, so it must outlive the communicator).
  Store* store = nullptr;
  // inproc: threads that pass the same group name form one group (the name
  // is free again once all have joined). ucx/nccl: prefix of store keys, so
  // several communicators can be created over one store.
  std::string group = "default";
  // Default for CollectiveOptions::timeout and for creation. Production jobs
  // want minutes; tests use about 2 s.
  absl::Duration timeout = absl::Minutes(5);
  // inproc: use the device-memory protocol (rendezvous when the collective is
  // issued, cross-rank order through events, copies enqueued on the ranks'
  // streams) also for host streams. CUDA streams always use it. For tests of
  // that protocol on machines without a GPU.
  bool inproc_event_protocol = false;
  // ucx: pipeline chunk of the ring (bytes). Same on every rank.
  size_t chunk_bytes = size_t{1} << 20;

  // The world ranks of this communicator's members, by rank (for reports:
  // comm/hang_report.h names world ranks). Empty: 0..size-1. Split fills
  // it for its children.
  std::vector<int> world_ranks;
  // ucx: the store prefix under which the communicators of one job record
  // which rank failed (comm/ucx/blame.h), so that every survivor names the
  // same rank whichever communicator it saw the failure in. Empty: `group`.
  // Split gives its children the parent's.
  std::string failure_group;
  // ucx: how failure messages name a world rank, e.g. "rank 3 (pipeline
  // stage 1)"; empty: "rank N". Split's children inherit it. Called on a
  // failing thread; must not call back into the communicator.
  std::function<std::string(int world_rank)> rank_name;
  // The flight recorder this communicator records into
  // (comm/flight_recorder.h); null: a new one. Children of Split share
  // their parent's. One per rank: ranks never share one (CreateInprocGroup
  // gives every rank its own when this is null).
  std::shared_ptr<FlightRecorder> recorder;
  // Where the rank that writes the hang report (communicator.h, "Hang
  // report") sends it, once per job and group; empty: stderr. Called on a
  // thread of the failing rank (the issuing thread, a stream's worker or a
  // backend's watchdog); must not call back into the communicator.
  std::function<void(const std::string&)> on_hang_report;
  // nccl: also record a timing event before every collective, so the
  // flight recorder holds the time the GPU reached it (its arrival, for
  // straggler reports: scheduler/arrivals.h) instead of the host's issue
  // time. Costs one cudaEventRecord per collective. Other backends observe
  // arrival on the host stream always.
  bool device_arrivals = false;
};

}  // namespace baton

#endif  // BATON_COMM_COMM_CONFIG_H_
