#include "baton/comm/ucx/ring.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace baton::ucx_internal {
namespace {
constexpr int kHeaderKind = 2;
constexpr int kMaxChunks = 1 << 16;
int Mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

RingJob::RingJob(const CollectiveHeader& header, const void* send, void* recv,
                 const RingLinks& links, absl::Duration timeout,
                 std::unique_ptr<Scratch> scratch, bool raw)
    : links_(links),
      deadline_(absl::Now() + timeout),
      timeout_(timeout),
      mine_(header),
      prev_rank_(Mod(links.rank - 1, links.size)),
      next_rank_(Mod(links.rank + 1, links.size)),
      esize_(raw ? 1 : DataTypeSize(static_cast<DataType>(header.type))),
      divisor_(static_cast<ReduceOp>(header.op) == ReduceOp::kAvg ? links.size
                                                                   : 1),
      max_(static_cast<ReduceOp>(header.op) == ReduceOp::kMax),
      raw_(raw),
      send_(send),
      recv_(recv),
      scratch_(std::move(scratch)) {
  const int n = links_.size;
  const int r = links_.rank;
  const size_t count = header.count;
  steps_ = n - 1;
  hdr_out_.resize(steps_);
  hdr_in_.resize(steps_);
  hdr_send_state_.assign(steps_, kIdle);
  hdr_recv_state_.assign(steps_, kIdle);
  hdr_send_req_.assign(steps_, nullptr);
  hdr_recv_req_.assign(steps_, nullptr);
  hdr_recv_len_.assign(steps_, 0);
  hdr_checked_.assign(steps_, false);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<size_t> even(n + 1), uneven(n + 1);
  for (int b = 0; b <= n; ++b) {
    even[b] = count * b;
    uneven[b] = count * b / n;
  }
  if (raw_) {
    AddPass(Mode::kRaw, {0, count}, in, out);
    return;
  }
  switch (static_cast<CollectiveKind>(header.kind)) {
    case CollectiveKind::kAllGather:
      AddPass(Mode::kForward, even, in, out);
      break;
    case CollectiveKind::kReduceScatter:
      AddPass(Mode::kReduce, even, in, out);
      break;
    case CollectiveKind::kAllReduce: {
      char* mine = out + uneven[r] * esize_;
      AddPass(Mode::kReduce, uneven, in, mine);
      AddPass(Mode::kForward, uneven, mine, out);
      break;
    }
    case CollectiveKind::kBroadcast:
      AddPass(Mode::kChain, {0, count}, in, out);
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSend:  // point-to-point: p2p.cc, never a ring
    case CollectiveKind::kRecv:
      break;
  }
}

RingJob::~RingJob() { CancelAll(); }

std::unique_ptr<Scratch> RingJob::TakeScratch() {
  if (!finished_ || !status_.ok()) return nullptr;
  return std::move(scratch_);
}

void RingJob::AddPass(Mode mode, std::vector<size_t> begin, const char* in,
                      char* out) {
  const int n = links_.size;
  Pass p;
  p.mode = mode;
  p.kind_bits = static_cast<int>(passes_.size());
  p.in = in;
  p.out = out;
  p.steps = n == 1 ? 0 : (mode == Mode::kChain || mode == Mode::kRaw) ? 1
                                                                        : n - 1;
  const bool wide = mode == Mode::kReduce && mine_.accumulate_fp32 != 0 &&
                    esize_ == 2;
  p.wire_esize = wide ? 4 : esize_;
  size_t max_block = 0;
  for (size_t b = 0; b + 1 < begin.size(); ++b) {
    max_block = std::max(max_block, begin[b + 1] - begin[b]);
  }
  p.begin = std::move(begin);
  if (mode == Mode::kRaw) {
    p.chunk_elems = std::max<size_t>(1, max_block);
  } else {
    p.chunk_elems = std::max<size_t>(1, links_.chunk_bytes / p.wire_esize);
    // Keep the chunk index inside its 16 tag bits.
    p.chunk_elems = std::max(p.chunk_elems, (max_block + kMaxChunks - 1) /
                                                kMaxChunks);
  }
  p.nchunks = static_cast<int>((max_block + p.chunk_elems - 1) / p.chunk_elems);
  const size_t slots = static_cast<size_t>(p.steps) * p.nchunks;
  p.send_state.assign(slots, kIdle);
  p.recv_state.assign(slots, kIdle);
  p.send_req.assign(slots, nullptr);
  p.recv_req.assign(slots, nullptr);
  p.recv_len.assign(slots, 0);
  if (mode == Mode::kReduce) {
    max_block_ = max_block;
    if (p.steps > 0) {
      if (scratch_ == nullptr) scratch_ = std::make_unique<Scratch>();
      scratch_->Reserve(2 * max_block * p.wire_esize);
    }
  }
  passes_.push_back(std::move(p));
}

uint64_t RingJob::Tag(int kind_bits, int step, int chunk) const {
  return (static_cast<uint64_t>(mine_.tag & 0xff) << 56) |
         ((mine_.seq & 0xffffffull) << 32) |
         (static_cast<uint64_t>(kind_bits & 3) << 30) |
         (static_cast<uint64_t>(step & 0x3fff) << 16) |
         static_cast<uint64_t>(chunk & 0xffff);
}

void RingJob::Fail(Status s, Suspect who) {
  if (status_.ok()) {
    status_ = std::move(s);
    suspect_ = who;
  }
}

void RingJob::FailNext(Status s, bool dead) {
  if (next_error_.ok()) {
    next_error_ = std::move(s);
    next_suspect_ = Suspect{next_rank_, dead};
  }
}

uint8_t RingJob::PostSend(ucp_ep_h ep, const void* buf, size_t len,
                          uint64_t tag, void** req) {
  ucp_request_param_t param{};
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &param);
  if (r == nullptr) return kDone;
  if (UCS_PTR_IS_ERR(r)) {
    FailNext(absl::UnavailableError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": send to rank ", next_rank_,
        " failed: ", ucs_status_string(UCS_PTR_STATUS(r)))),
             /*dead=*/true);
    return kIdle;
  }
  *req = r;
  return kPosted;
}

namespace {
// Completion callback of a receive: records the received length.
void OnRecvDone(void* request, ucs_status_t status,
                const ucp_tag_recv_info_t* info, void* user_data) {
  if (info != nullptr) *static_cast<size_t*>(user_data) = info->length;
}
}  // namespace

uint8_t RingJob::PostRecv(void* buf, size_t len, uint64_t tag, void** req,
                          size_t* got) {
  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO |
                       UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA |
                       // Always a request, so the callback reports the
                       // length (UCX 1.13 leaves recv_info unset on some
                       // immediate completions).
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.recv_info.tag_info = &info;
  param.cb.recv = &OnRecvDone;
  param.user_data = got;
  *got = 0;
  ucs_status_ptr_t r =
      ucp_tag_recv_nbx(links_.worker, buf, len, tag, ~uint64_t{0}, &param);
  if (r == nullptr) {
    if (info.length != len) {
      Fail(absl::InvalidArgumentError(absl::StrCat(
          "ucx ", CollectiveLabel(mine_), ": rank ", prev_rank_, " sent ",
          info.length, " bytes where ", len, " were expected")));
      return kIdle;
    }
    return kDone;
  }
  if (UCS_PTR_IS_ERR(r)) {
    Fail(absl::UnavailableError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": receive from rank ", prev_rank_,
        " failed: ", ucs_status_string(UCS_PTR_STATUS(r)))),
         Suspect{prev_rank_, true});
    return kIdle;
  }
  *req = r;
  return kPosted;
}

uint8_t RingJob::Test(void** req, const size_t* got, size_t expected,
                      int peer) {
  const bool is_recv = got != nullptr;
  const ucs_status_t st = ucp_request_check_status(*req);
  if (st == UCS_INPROGRESS) return kPosted;
  ucp_request_free(*req);
  *req = nullptr;
  if (st == UCS_ERR_MESSAGE_TRUNCATED) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": rank ", peer,
        " sent more bytes than expected (mismatched calls?)")));
    return kIdle;
  }
  if (st != UCS_OK) {
    Status e = absl::UnavailableError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": transfer with rank ", peer,
        " failed: ", ucs_status_string(st)));
    if (is_recv) {
      Fail(std::move(e), Suspect{peer, true});
    } else {
      FailNext(std::move(e), /*dead=*/true);
    }
    return kIdle;
  }
  if (is_recv && *got != expected) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": rank ", peer, " sent ", *got,
        " bytes where ", expected, " were expected")));
    return kIdle;
  }
  return kDone;
}

void RingJob::CancelAll() {
  auto cancel = [this](std::vector<void*>& reqs) {
    for (void*& r : reqs) {
      if (r == nullptr) continue;
      ucp_request_cancel(links_.worker, r);
      ucp_request_free(r);
      r = nullptr;
    }
  };
  cancel(hdr_send_req_);
  cancel(hdr_recv_req_);
  for (Pass& p : passes_) {
    cancel(p.send_req);
    cancel(p.recv_req);
  }
}

void RingJob::AdvanceHeaders() {
  for (int s = 0; s < steps_ && status_.ok(); ++s) {
    if (hdr_recv_state_[s] == kIdle) {
      hdr_recv_state_[s] =
          PostRecv(&hdr_in_[s], sizeof(CollectiveHeader),
                   Tag(kHeaderKind, s, 0), &hdr_recv_req_[s], &hdr_recv_len_[s]);
    } else if (hdr_recv_state_[s] == kPosted) {
      hdr_recv_state_[s] = Test(&hdr_recv_req_[s], &hdr_recv_len_[s],
                                sizeof(CollectiveHeader), prev_rank_);
    }
    if (hdr_recv_state_[s] == kDone && !hdr_checked_[s]) {
      hdr_checked_[s] = true;
      CollectiveHeader theirs = hdr_in_[s];
      const bool flagged = theirs.error != 0;
      theirs.error = 0;
      theirs.error_rank = 0;
      theirs.error_other = 0;
      if (!mismatch_) {
        const std::string diff =
            DescribeMismatch(mine_, links_.rank, theirs, prev_rank_);
        if (!diff.empty()) {
          mismatch_ = true;
          mismatch_text_ = diff;
          error_rank_ = static_cast<uint32_t>(links_.rank);
          error_other_ = static_cast<uint32_t>(prev_rank_);
        } else if (flagged) {
          mismatch_ = true;
          error_rank_ = hdr_in_[s].error_rank;
          error_other_ = hdr_in_[s].error_other;
          mismatch_text_ =
              absl::StrCat("rank ", error_rank_, " found that its call differs "
                           "from rank ", error_other_, "'s");
        }
      }
    }
    if (hdr_send_state_[s] == kIdle && (s == 0 || hdr_checked_[s - 1])) {
      // Written just before its own send, never while in flight.
      hdr_out_[s] = mine_;
      if (mismatch_) {
        hdr_out_[s].error = 1;
        hdr_out_[s].error_rank = error_rank_;
        hdr_out_[s].error_other = error_other_;
      }
      hdr_send_state_[s] =
          PostSend(links_.next, &hdr_out_[s], sizeof(CollectiveHeader),
                   Tag(kHeaderKind, s, 0), &hdr_send_req_[s]);
    } else if (hdr_send_state_[s] == kPosted) {
      hdr_send_state_[s] = Test(&hdr_send_req_[s], nullptr, 0, next_rank_);
    }
  }
}

int RingJob::SendBlock(const Pass& p, int s) const {
  switch (p.mode) {
    case Mode::kForward:
      return Mod(links_.rank - s, links_.size);
    case Mode::kReduce:
      return Mod(links_.rank - s - 1, links_.size);
    default:
      return 0;
  }
}

int RingJob::RecvBlock(const Pass& p, int s) const {
  switch (p.mode) {
    case Mode::kForward:
      return Mod(links_.rank - s - 1, links_.size);
    case Mode::kReduce:
      return Mod(links_.rank - s - 2, links_.size);
    default:
      return 0;
  }
}

bool RingJob::ChainSends(const Pass& p) const {
  if (p.mode == Mode::kRaw) return true;
  if (p.mode != Mode::kChain) return true;
  return Mod(links_.rank - mine_.root, links_.size) < links_.size - 1;
}

bool RingJob::ChainRecvs(const Pass& p) const {
  if (p.mode != Mode::kChain) return true;
  return Mod(links_.rank - mine_.root, links_.size) > 0;
}

size_t RingJob::ChunkLen(const Pass& p, int block, int c) const {
  const size_t blen = p.begin[block + 1] - p.begin[block];
  const size_t start = static_cast<size_t>(c) * p.chunk_elems;
  return start >= blen ? 0 : std::min(p.chunk_elems, blen - start);
}

const char* RingJob::SendPtr(Pass& p, int s, int c, int* block) {
  *block = SendBlock(p, s);
  const size_t off = static_cast<size_t>(c) * p.chunk_elems;
  switch (p.mode) {
    case Mode::kForward:
      return s == 0 ? p.in + off * esize_
                    : p.out + (p.begin[*block] + off) * esize_;
    case Mode::kReduce: {
      char* tmp = scratch_->data.get();
      const size_t half = max_block_ * p.wire_esize;
      const char* src = p.in + (p.begin[*block] + off) * esize_;
      if (s > 0) return tmp + ((s - 1) % 2) * half + off * p.wire_esize;
      if (p.wire_esize == esize_) return src;
      float* wide = reinterpret_cast<float*>(tmp + half + off * 4);
      WidenToF32(wide, src, static_cast<DataType>(mine_.type),
                 ChunkLen(p, *block, c));
      return reinterpret_cast<const char*>(wide);
    }
    case Mode::kChain: {
      const bool root = links_.rank == mine_.root;
      return (root ? p.in : p.out) + off * esize_;
    }
    case Mode::kRaw:
      return p.in;
  }
  return nullptr;
}

char* RingJob::RecvPtr(Pass& p, int s, int c, int* block) {
  *block = RecvBlock(p, s);
  const size_t off = static_cast<size_t>(c) * p.chunk_elems;
  switch (p.mode) {
    case Mode::kForward:
      return p.out + (p.begin[*block] + off) * esize_;
    case Mode::kReduce:
      return scratch_->data.get() + (s % 2) * max_block_ * p.wire_esize +
             off * p.wire_esize;
    case Mode::kChain:
    case Mode::kRaw:
      return p.out + off * esize_;
  }
  return nullptr;
}

void RingJob::OnRecv(Pass& p, int s, int c) {
  if (p.mode != Mode::kReduce) return;
  int block;
  char* t = RecvPtr(p, s, c, &block);
  const size_t len = ChunkLen(p, block, c);
  if (len == 0) return;
  const auto type = static_cast<DataType>(mine_.type);
  const char* in = p.in + (p.begin[block] + c * p.chunk_elems) * esize_;
  const bool wide = p.wire_esize != esize_;
  if (s < p.steps - 1) {
    if (wide) {
      AccumulateF32(reinterpret_cast<float*>(t), in, type, len);
    } else if (max_) {
      MaxInto(t, t, in, type, len);
    } else {
      AddInto(t, t, in, type, len);
    }
    return;
  }
  // Last step: block == rank, the final sum goes to the output.
  char* out = p.out + c * p.chunk_elems * esize_;
  if (wide) {
    float* f = reinterpret_cast<float*>(t);
    AccumulateF32(f, in, type, len);
    DivideInPlace(f, DataType::kF32, len, divisor_);
    NarrowFromF32(out, f, type, len);
  } else if (max_) {
    MaxInto(out, t, in, type, len);
  } else {
    AddInto(out, t, in, type, len);
    DivideInPlace(out, type, len, divisor_);
  }
}

void RingJob::StartPass(Pass& p) {
  p.started = true;
  const int r = links_.rank;
  const auto type = static_cast<DataType>(mine_.type);
  switch (p.mode) {
    case Mode::kForward: {
      char* dst = p.out + p.begin[r] * esize_;
      const size_t len = (p.begin[r + 1] - p.begin[r]) * esize_;
      if (len > 0 && dst != p.in) std::memcpy(dst, p.in, len);
      break;
    }
    case Mode::kReduce:
      if (p.steps == 0) {
        const void* src = p.in + p.begin[r] * esize_;
        ReduceSources(p.out, &src, 1, p.begin[r + 1] - p.begin[r], type,
                      mine_.accumulate_fp32 != 0, divisor_);
      }
      break;
    case Mode::kChain: {
      const size_t len = mine_.count * esize_;
      if (r == mine_.root && len > 0 && p.out != p.in) {
        std::memcpy(p.out, p.in, len);
      }
      if (!ChainSends(p)) std::fill(p.send_state.begin(), p.send_state.end(), kDone);
      if (!ChainRecvs(p)) std::fill(p.recv_state.begin(), p.recv_state.end(), kDone);
      break;
    }
    case Mode::kRaw:
      break;
  }
}

bool RingJob::AdvancePass(Pass& p) {
  if (!p.started) StartPass(p);
  const int nc = p.nchunks;
  bool complete = true;
  for (int s = 0; s < p.steps && status_.ok(); ++s) {
    if (steps_ > 0 && !hdr_checked_[s]) return false;
    for (int c = 0; c < nc && status_.ok(); ++c) {
      const size_t i = static_cast<size_t>(s) * nc + c;
      // Receive.
      uint8_t& rs = p.recv_state[i];
      if (rs == kIdle) {
        const bool allowed = p.mode != Mode::kReduce || s == 0 ||
                             p.send_state[i - nc] == kDone;
        if (allowed) {
          int block;
          char* dst = RecvPtr(p, s, c, &block);
          const size_t bytes = ChunkLen(p, block, c) * p.wire_esize;
          rs = bytes == 0 ? uint8_t{kDone}
                          : PostRecv(dst, bytes, Tag(p.kind_bits, s, c),
                                     &p.recv_req[i], &p.recv_len[i]);
          if (rs == kDone) OnRecv(p, s, c);
        }
      } else if (rs == kPosted) {
        int block;
        RecvPtr(p, s, c, &block);
        rs = Test(&p.recv_req[i], &p.recv_len[i],
                  ChunkLen(p, block, c) * p.wire_esize, prev_rank_);
        if (rs == kDone) OnRecv(p, s, c);
      }
      // Send.
      uint8_t& ss = p.send_state[i];
      if (ss == kIdle) {
        bool allowed = true;
        if (p.mode == Mode::kForward || p.mode == Mode::kReduce) {
          allowed = s == 0 || p.recv_state[i - nc] == kDone;
        } else if (p.mode == Mode::kChain) {
          allowed = links_.rank == mine_.root || p.recv_state[i] == kDone;
        }
        if (allowed) {
          int block;
          const char* src = SendPtr(p, s, c, &block);
          const size_t bytes = ChunkLen(p, block, c) * p.wire_esize;
          ss = bytes == 0 ? uint8_t{kDone}
                          : PostSend(links_.next, src, bytes,
                                     Tag(p.kind_bits, s, c), &p.send_req[i]);
        }
      } else if (ss == kPosted) {
        ss = Test(&p.send_req[i], nullptr, 0, next_rank_);
      }
      complete = complete && rs == kDone && ss == kDone;
    }
  }
  return complete && status_.ok();
}

bool RingJob::WaitingRecv() const {
  bool waiting = false;
  for (uint8_t st : hdr_recv_state_) waiting |= st != kDone;
  if (current_ < passes_.size()) {
    for (uint8_t st : passes_[current_].recv_state) waiting |= st != kDone;
  }
  return waiting;
}

int RingJob::waiting_on() const {
  return WaitingRecv() ? prev_rank_ : next_rank_;
}

bool RingJob::Advance() {
  if (finished_) return true;
  if (status_.ok()) AdvanceHeaders();
  bool headers_done = true;
  for (int s = 0; s < steps_; ++s) {
    headers_done = headers_done && hdr_send_state_[s] == kDone &&
                   hdr_recv_state_[s] == kDone;
  }
  if (status_.ok() && mismatch_ && headers_done) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "ucx ", CollectiveLabel(mine_), ": mismatched calls: ",
        mismatch_text_)));
  }
  if (status_.ok() && !mismatch_ && next_error_.ok()) {
    while (current_ < passes_.size() && AdvancePass(passes_[current_])) {
      ++current_;
    }
  }
  if (status_.ok() && !next_error_.ok()) {
    // The next rank is gone or refused our data. It may have left because
    // it already found a mismatch, which then is the error to report: keep
    // receiving the previous rank's headers (it is alive) until they are all
    // in or the deadline passes.
    bool received = true;
    for (uint8_t st : hdr_recv_state_) received = received && st == kDone;
    if (mismatch_) {
      Fail(absl::InvalidArgumentError(absl::StrCat(
          "ucx ", CollectiveLabel(mine_), ": mismatched calls: ",
          mismatch_text_, " (then: ", next_error_.message(), ")")));
    } else if (received || absl::Now() > deadline_) {
      Fail(next_error_, next_suspect_);
    }
  }
  if (status_.ok() && !mismatch_ && current_ == passes_.size() &&
      headers_done) {
    finished_ = true;
    return true;
  }
  // A peer that failed (or closed its endpoint) matters only if we still
  // need something from it.
  if (links_.size > 1 && links_.peer_status) {
    for (int peer : {prev_rank_, next_rank_}) {
      Status s = links_.peer_status(peer);
      if (!s.ok()) {
        Status e = absl::UnavailableError(absl::StrCat(
            "ucx ", CollectiveLabel(mine_), ": rank ", peer,
            " failed: ", s.message()));
        if (peer == prev_rank_) {
          Fail(std::move(e), Suspect{peer, true});
          break;
        }
        FailNext(std::move(e), /*dead=*/true);
      }
    }
  }
  if (status_.ok() && absl::Now() > deadline_) {
    const bool waiting_recv = WaitingRecv();
    Fail(absl::DeadlineExceededError(absl::StrCat(
             "ucx ", CollectiveLabel(mine_), " on rank ", links_.rank,
             ": no progress within ", absl::FormatDuration(timeout_),
             waiting_recv ? absl::StrCat(", waiting for data from rank ",
                                         prev_rank_)
                          : absl::StrCat(", rank ", next_rank_,
                                         " did not take our data"))),
         Suspect{waiting_recv ? prev_rank_ : next_rank_, false});
  }
  if (!status_.ok()) {
    // Once a mismatch is known it is the cause; a peer that already gave up
    // on this collective and closed its connection is a consequence.
    if (mismatch_ && !absl::IsInvalidArgument(status_)) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "ucx ", CollectiveLabel(mine_), ": mismatched calls: ",
          mismatch_text_, " (then: ", status_.message(), ")"));
    }
    if (mismatch_) suspect_ = Suspect{};
    CancelAll();
    finished_ = true;
    return true;
  }
  return false;
}

}  // namespace baton::ucx_internal
