// One collective of the ucx backend as a state machine driven by the
// progress thread (ucx.cc). Not thread-safe: only that thread touches it.
//
// Every collective is one or two ring passes over the ranks plus a chain of
// small headers:
//   header chain  step s (0..n-2): receive the header of step s from the
//                 previous rank; send ours for step s to the next rank once
//                 the previous one's step s-1 arrived. A rank that finds a
//                 difference (count, type, op, root, kind) sets the error
//                 flag in all later headers, so after n-1 hops every rank
//                 knows, and all return InvalidArgument instead of exchanging
//                 data of the wrong size. Data of step s is received only
//                 after the header of step s matched.
//   forward pass  (all-gather) step s: send block (r-s) mod n to rank r+1,
//                 receive block (r-s-1) mod n from rank r-1.
//   reduce pass   (reduce-scatter) step s: send the partial sum of block
//                 (r-s-1) mod n; receive that of block (r-s-2) mod n into a
//                 scratch half and add this rank's input; at the last step
//                 the sum of block r goes to the output.
//   chain pass    (broadcast) chunks flow root -> root+1 -> ... .
// All-reduce is a reduce pass then a forward pass over uneven blocks.
// Blocks are cut into chunks of CommConfig::chunk_bytes; chunk c of step s
// is sent as soon as chunk c of step s-1 arrived, so steps overlap (a
// pipelined ring). Tags: user tag (8 bits) | sequence (24) | kind (2) |
// step (14) | chunk (16).
#ifndef BATON_COMM_UCX_RING_H_
#define BATON_COMM_UCX_RING_H_

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/comm/backend_util.h"
#include "baton/runtime/status.h"

namespace baton::ucx_internal {

struct RingLinks {
  ucp_worker_h worker = nullptr;
  ucp_ep_h next = nullptr;
  ucp_ep_h prev = nullptr;
  int rank = 0;
  int size = 1;
  size_t chunk_bytes = 1 << 20;
  // OK while the peer is alive; else why not (set by the endpoint's error
  // handler).
  std::function<Status(int peer)> peer_status;
};

// Scratch memory for the partial sums of a reduce pass, reused across
// collectives (growing only; contents are never read before written).
struct Scratch {
  std::unique_ptr<char[]> data;
  size_t bytes = 0;
  void Reserve(size_t n) {
    if (n > bytes) {
      data.reset(new char[n]);
      bytes = n;
    }
  }
};

// The peer a failed collective points at, as this rank saw it: `dead` when
// the transport reported an error on the link to it (hard evidence), else
// it only went silent (a timeout waiting for it). rank -1: no peer is to
// blame (mismatched calls, a local abort).
struct Suspect {
  int rank = -1;
  bool dead = false;
};

class RingJob {
 public:
  // `raw`: instead of a collective, send `count` bytes from `send` to the
  // next rank and receive as many from the previous one into `recv`, in one
  // message (MeasureLimit). The header chain still runs.
  RingJob(const CollectiveHeader& header, const void* send, void* recv,
          const RingLinks& links, absl::Duration timeout,
          std::unique_ptr<Scratch> scratch, bool raw = false);
  ~RingJob();
  RingJob(const RingJob&) = delete;
  RingJob& operator=(const RingJob&) = delete;

  // Posts what can be posted and reaps completions. True once finished;
  // then status() is final. On failure outstanding requests are cancelled
  // and released; the job must still outlive the worker's next progress
  // calls (the caller keeps failed jobs until the worker is destroyed).
  bool Advance();
  const Status& status() const { return status_; }
  // Whom the failure points at (meaningful once finished with an error).
  Suspect suspect() const { return suspect_; }
  // While unfinished: the rank this job waits on now (the previous rank
  // while a receive is outstanding, else the next), as a timeout now would
  // name it.
  int waiting_on() const;
  const CollectiveHeader& header() const { return mine_; }
  // Gives the scratch back after a successful finish (null otherwise).
  std::unique_ptr<Scratch> TakeScratch();

 private:
  enum class Mode { kForward, kReduce, kChain, kRaw };
  enum : uint8_t { kIdle = 0, kPosted = 1, kDone = 2 };

  struct Pass {
    Mode mode;
    int kind_bits;  // 0 or 1: which pass, in the tag
    std::vector<size_t> begin;  // n+1 block boundaries, in elements
    const char* in = nullptr;
    char* out = nullptr;
    size_t chunk_elems = 0;
    int nchunks = 0;
    int steps = 0;
    size_t wire_esize = 0;
    std::vector<uint8_t> send_state, recv_state;
    std::vector<void*> send_req, recv_req;
    std::vector<size_t> recv_len;  // written by the receive callback
    bool started = false;
  };

  void AddPass(Mode mode, std::vector<size_t> begin, const char* in,
               char* out);
  void StartPass(Pass& p);
  bool AdvancePass(Pass& p);   // true when the pass is complete
  void AdvanceHeaders();
  void OnRecv(Pass& p, int s, int c);
  // Pointers and lengths of chunk c of step s.
  size_t ChunkLen(const Pass& p, int block, int c) const;
  const char* SendPtr(Pass& p, int s, int c, int* block);
  char* RecvPtr(Pass& p, int s, int c, int* block);
  int SendBlock(const Pass& p, int s) const;
  int RecvBlock(const Pass& p, int s) const;
  bool ChainSends(const Pass& p) const;
  bool ChainRecvs(const Pass& p) const;

  uint64_t Tag(int kind_bits, int step, int chunk) const;
  // Returns kDone/kPosted; sets status_ on error.
  uint8_t PostSend(ucp_ep_h ep, const void* buf, size_t len, uint64_t tag,
                   void** req);
  // `got` receives the received length (through the completion callback).
  uint8_t PostRecv(void* buf, size_t len, uint64_t tag, void** req,
                   size_t* got);
  // Completion of a posted request (a receive when `got` is not null):
  // kDone, kPosted, or sets status_.
  uint8_t Test(void** req, const size_t* got, size_t expected, int peer);
  void Fail(Status s, Suspect who = {});
  // A receive (of a header or of the current pass) is outstanding.
  bool WaitingRecv() const;
  // A failure on the link to the next rank (see Advance).
  void FailNext(Status s, bool dead);
  void CancelAll();

  const RingLinks links_;
  const absl::Time deadline_;
  const absl::Duration timeout_;
  const CollectiveHeader mine_;
  const int prev_rank_, next_rank_;
  const size_t esize_;
  const int divisor_;
  const bool max_;  // ReduceOp::kMax: the maximum instead of the sum
  const bool raw_;
  const void* send_;
  void* recv_;

  std::vector<Pass> passes_;
  size_t current_ = 0;
  std::unique_ptr<Scratch> scratch_;
  size_t max_block_ = 0;  // elements, of the reduce pass

  // Header chain.
  int steps_ = 0;
  std::vector<CollectiveHeader> hdr_out_, hdr_in_;
  std::vector<uint8_t> hdr_send_state_, hdr_recv_state_;
  std::vector<void*> hdr_send_req_, hdr_recv_req_;
  std::vector<size_t> hdr_recv_len_;
  std::vector<bool> hdr_checked_;
  bool mismatch_ = false;  // this rank found or was told of a mismatch
  std::string mismatch_text_;
  uint32_t error_rank_ = 0;
  uint32_t error_other_ = 0;

  bool finished_ = false;
  Status status_;
  Suspect suspect_;
  Status next_error_;
  Suspect next_suspect_;
};

}  // namespace baton::ucx_internal

#endif  // BATON_COMM_UCX_RING_H_
