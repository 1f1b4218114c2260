// The streams of a step graph and the collective tags used on them.
//
// A step runs on up to three streams, one per StreamClass: compute (the
// trainer's), all-gather and reduce-scatter. Under Policy::shared_comm_stream
// the two comm classes share one stream. Under Policy::offload two more
// follow: the host-link copy stream (device-to-host gradient shards,
// host-to-device parameter shards) and the host stream (the optimizer and
// cast as host work on host memory). A graph of tensor, context or pipeline
// parallelism (scheduler/parallel_graph.h, never under offload) has three
// others in their place: the tensor stream (tensor-parallel collectives)
// and the pipeline send and receive streams (activations and their
// gradients between stages), and in a graph with mixture-of-experts blocks
// one more, the expert stream (token dispatch and combine, all-to-all over
// the expert-parallel group). A node names its stream by StreamId,
// a dense index 0..StepGraph::num_streams-1 that the executor uses for its
// runtime streams and the simulator for its lanes; a StreamId comes from
// StreamFor (or from an index when iterating over a graph's streams), so no
// code spells an index or compares with a bare number.
//
// Collective tags (CollectiveOptions::tag, comm/communicator.h): the step's
// collectives are matched per comm stream, so each comm stream has its own
// tag (CollectiveTag). A trainer that issues collectives of its own on the
// executor's communicator uses kFirstTrainerTag and above.
//
// Plain values; thread-safe.
#ifndef BATON_SCHEDULER_STREAMS_H_
#define BATON_SCHEDULER_STREAMS_H_

#include <cstdint>

namespace baton::scheduler {

enum class StreamClass : uint8_t {
  kCompute,
  kAllGather,
  kReduceScatter,
  kHostCopy,  // offload only: D2H / H2D copies
  kHost,      // offload only: host optimizer and cast
  kTensor,        // parallel graphs only: tensor-parallel collectives
  kPipelineSend,  // parallel graphs only: sends to other stages
  kPipelineRecv,  // parallel graphs only: receives from other stages
  kExpert,        // parallel graphs with experts: dispatch / combine
};

class StreamId {
 public:
  constexpr StreamId() = default;  // the compute stream
  // Index `i` of a graph's streams (0 <= i < StepGraph::num_streams).
  constexpr explicit StreamId(int i) : index_(i) {}

  constexpr int index() const { return index_; }
  constexpr bool is_compute() const { return index_ == 0; }

  friend constexpr bool operator==(StreamId a, StreamId b) {
    return a.index_ == b.index_;
  }
  friend constexpr bool operator!=(StreamId a, StreamId b) {
    return a.index_ != b.index_;
  }

 private:
  int index_ = 0;
};

inline constexpr StreamId kComputeStream{};

// The stream that runs nodes of class `c`: compute 0, all-gather 1,
// reduce-scatter 2, or 1 when the comm classes share a stream; then the
// host-copy and host streams (offload graphs only), or in their places the
// tensor, pipeline-send and pipeline-receive streams (parallel graphs,
// which never offload).
constexpr StreamId StreamFor(StreamClass c, bool shared_comm_stream) {
  const int comm = shared_comm_stream ? 1 : 2;
  switch (c) {
    case StreamClass::kCompute: return kComputeStream;
    case StreamClass::kAllGather: return StreamId(1);
    case StreamClass::kReduceScatter: return StreamId(comm);
    case StreamClass::kHostCopy: return StreamId(comm + 1);
    case StreamClass::kHost: return StreamId(comm + 2);
    case StreamClass::kTensor: return StreamId(comm + 1);
    case StreamClass::kPipelineSend: return StreamId(comm + 2);
    case StreamClass::kPipelineRecv: return StreamId(comm + 3);
    case StreamClass::kExpert: return StreamId(comm + 4);
  }
  return kComputeStream;
}

// How many streams a step uses (offload adds the host-copy and host ones,
// a parallel graph its tensor and two pipeline streams, and with experts
// the expert stream).
constexpr int NumStreams(bool shared_comm_stream, bool offload = false,
                         bool parallel = false, bool experts = false) {
  return (shared_comm_stream ? 2 : 3) + (offload ? 2 : 0) + (parallel ? 3 : 0) +
         (parallel && experts ? 1 : 0);
}

// Tag of the collectives issued on comm stream `s` (1 on the all-gather or
// shared comm stream, 2 on the reduce-scatter stream; in parallel graphs
// the tensor, pipeline and expert streams' indices, at most 6).
constexpr uint32_t CollectiveTag(StreamId s) {
  return static_cast<uint32_t>(s.index());
}
// The tag of a checkpoint save's one collective (the broadcast of its
// nonce on the checkpoint stream; scheduler/checkpoint.h): above every
// step tag, parallel graphs' included.
inline constexpr uint32_t kCheckpointTag = 7;
// The first tag neither the step's collectives nor the executor's own use.
inline constexpr uint32_t kFirstTrainerTag = 8;

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_STREAMS_H_
