#include "baton/comm/ucx/p2p.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/comm/backend_util.h"

namespace baton::ucx_internal {
namespace {
constexpr uint64_t kAckMagic = 0xBA70A11C0000ACCEull;
constexpr int kP2PKind = 3;  // the ring uses kinds 0..2 (ring.h)
}  // namespace

uint64_t P2PJob::Tag(uint32_t tag, uint64_t seq, int from, bool ack) {
  return (static_cast<uint64_t>(tag & 0xff) << 56) |
         ((seq & 0xffffffull) << 32) |
         (static_cast<uint64_t>(kP2PKind) << 30) |
         (static_cast<uint64_t>(from & 0x3fff) << 16) | (ack ? 1u : 0u);
}

P2PJob::P2PJob(std::vector<Op> ops, uint32_t tag, const P2PLinks& links,
               absl::Duration timeout)
    : tag_(tag),
      links_(links),
      deadline_(absl::Now() + timeout),
      timeout_(timeout) {
  for (Op& o : ops) {
    Item it;
    it.o = std::move(o);
    items_.push_back(std::move(it));
  }
}

P2PJob::~P2PJob() { CancelAll(); }

std::string P2PJob::Label(const Item& it) const {
  return absl::StrCat("ucx ", P2PLabel(it.o.op, tag_, it.o.seq), " on rank ",
                      links_.rank);
}

void P2PJob::Fail(Status s, Suspect who) {
  if (status_.ok()) {
    status_ = std::move(s);
    suspect_ = who;
  }
}

void P2PJob::CancelAll() {
  for (Item& it : items_) {
    for (void** r : {&it.data_req, &it.ack_req}) {
      if (*r == nullptr) continue;
      ucp_request_cancel(links_.worker, *r);
      ucp_request_free(*r);
      *r = nullptr;
    }
  }
}

namespace {
void OnRecvDone(void* request, ucs_status_t status,
                const ucp_tag_recv_info_t* info, void* user_data) {
  (void)request;
  (void)status;
  if (info != nullptr) *static_cast<size_t*>(user_data) = info->length;
}
}  // namespace

uint8_t P2PJob::Check(void** req, Item& it, const char* what) {
  const ucs_status_t st = ucp_request_check_status(*req);
  if (st == UCS_INPROGRESS) return kPosted;
  ucp_request_free(*req);
  *req = nullptr;
  if (st != UCS_OK) {
    Fail(absl::UnavailableError(absl::StrCat(
             Label(it), ": ", what, " with rank ", it.o.op.peer,
             " failed: ", ucs_status_string(st))),
         Suspect{it.o.op.peer, true});
    return kIdle;
  }
  return kDone;
}

bool P2PJob::Posted(ucs_status_ptr_t r, Item& it, const char* what, void** req,
                    uint8_t* state) {
  if (UCS_PTR_IS_ERR(r)) {
    Fail(absl::UnavailableError(absl::StrCat(Label(it), ": ", what, " failed: ",
                                             ucs_status_string(UCS_PTR_STATUS(r)))),
         Suspect{it.o.op.peer, true});
    return false;
  }
  *req = r;
  *state = r == nullptr ? kDone : kPosted;
  return true;
}

StatusOr<ucp_ep_h> P2PJob::Endpoint(Item& it) {
  StatusOr<ucp_ep_h> ep = links_.endpoint(it.o.op.peer);
  if (!ep.ok()) {
    Fail(absl::UnavailableError(absl::StrCat(Label(it), ": ", ep.status().message())),
         Suspect{it.o.op.peer, true});
  }
  return ep;
}

void P2PJob::AdvanceSend(Item& it) {
  const int peer = it.o.op.peer;
  StatusOr<ucp_ep_h> ep = Endpoint(it);
  if (!ep.ok()) return;
  if (it.ack == kIdle) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &OnRecvDone;
    p.user_data = &it.ack_len;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(
        links_.worker, &it.ack_buf, sizeof(Ack),
        Tag(tag_, it.o.seq, peer, /*ack=*/true), ~uint64_t{0}, &p);
    // Never complete at once (UCP_OP_ATTR_FLAG_NO_IMM_CMPL): kPosted.
    if (!Posted(r, it, "receive of the acknowledgement", &it.ack_req, &it.ack)) return;
  }
  if (it.data == kIdle) {
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_tag_send_nbx(
        *ep, it.o.op.send, it.o.op.bytes(),
        Tag(tag_, it.o.seq, links_.rank, /*ack=*/false), &p);
    if (!Posted(r, it, "send", &it.data_req, &it.data)) return;
  }
  if (it.data == kPosted) it.data = Check(&it.data_req, it, "send");
  if (it.ack == kPosted && status_.ok()) {
    it.ack = Check(&it.ack_req, it, "acknowledgement");
    if (it.ack == kDone) {
      if (it.ack_len != sizeof(Ack) || it.ack_buf.magic != kAckMagic) {
        Fail(absl::InternalError(absl::StrCat(
                 Label(it), ": a malformed acknowledgement from rank ", peer)),
             Suspect{peer, false});
      } else if (it.ack_buf.ok == 0) {
        Fail(absl::InvalidArgumentError(absl::StrCat(
            Label(it), ": mismatched sizes: rank ", links_.rank, " sends ",
            it.o.op.bytes(), " bytes but rank ", peer, " receives ",
            it.ack_buf.recv_bytes, " bytes")));
      }
    }
  }
  it.done = status_.ok() && it.data == kDone && it.ack == kDone;
}

void P2PJob::AdvanceRecv(Item& it) {
  const int peer = it.o.op.peer;
  const size_t want = it.o.op.bytes();
  if (!it.probed) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(
        links_.worker, Tag(tag_, it.o.seq, peer, /*ack=*/false), ~uint64_t{0},
        /*remove=*/1, &info);
    if (msg == nullptr) return;
    it.probed = true;
    it.sent_bytes = info.length;
    if (it.sent_bytes == want) {
      ucp_request_param_t p{};
      ucs_status_ptr_t r =
          ucp_tag_msg_recv_nbx(links_.worker, it.o.op.recv, want, msg, &p);
      if (!Posted(r, it, "receive", &it.data_req, &it.data)) return;
    }
    // A size that differs is never received: the acknowledgement tells
    // the sender, and both fail.
  }
  if (it.data == kPosted) it.data = Check(&it.data_req, it, "receive");
  const bool agreed = it.sent_bytes == want;
  if (it.ack == kIdle && (it.data == kDone || !agreed)) {
    StatusOr<ucp_ep_h> ep = Endpoint(it);
    if (!ep.ok()) return;
    it.ack_buf = Ack{kAckMagic, want, agreed ? 1u : 0u};
    ucp_request_param_t p{};
    ucs_status_ptr_t r =
        ucp_tag_send_nbx(*ep, &it.ack_buf, sizeof(Ack),
                         Tag(tag_, it.o.seq, links_.rank, /*ack=*/true), &p);
    if (!Posted(r, it, "acknowledgement", &it.ack_req, &it.ack)) return;
  }
  if (it.ack == kPosted) it.ack = Check(&it.ack_req, it, "acknowledgement");
  if (it.ack == kDone && !agreed) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        Label(it), ": mismatched sizes: rank ", peer, " sends ",
        it.sent_bytes, " bytes but rank ", links_.rank, " receives ", want,
        " bytes")));
  }
  it.done = status_.ok() && it.ack == kDone && it.data == kDone;
}

int P2PJob::waiting_on() const {
  for (const Item& it : items_) {
    if (!it.done) return it.o.op.peer;
  }
  return -1;
}

bool P2PJob::Advance() {
  if (finished_) return true;
  bool all = true;
  for (Item& it : items_) {
    if (!status_.ok()) break;
    if (it.done) continue;
    if (it.o.op.kind == P2POp::Kind::kSend) {
      AdvanceSend(it);
    } else {
      AdvanceRecv(it);
    }
    all = all && it.done;
  }
  if (status_.ok() && all) {
    finished_ = true;
    return true;
  }
  for (Item& it : items_) {
    if (!status_.ok() || it.done || !links_.peer_status) break;
    Status s = links_.peer_status(it.o.op.peer);
    if (!s.ok()) {
      Fail(absl::UnavailableError(absl::StrCat(Label(it), ": rank ",
                                               it.o.op.peer, " failed: ",
                                               s.message())),
           Suspect{it.o.op.peer, true});
    }
  }
  if (status_.ok() && absl::Now() > deadline_) {
    for (Item& it : items_) {
      if (it.done) continue;
      const bool send = it.o.op.kind == P2POp::Kind::kSend;
      Fail(absl::DeadlineExceededError(absl::StrCat(
               Label(it), ": rank ", it.o.op.peer,
               send ? " did not receive it" : " did not send it", " within ",
               absl::FormatDuration(timeout_))),
           Suspect{it.o.op.peer, false});
      break;
    }
  }
  if (!status_.ok()) {
    CancelAll();
    finished_ = true;
    return true;
  }
  return false;
}

}  // namespace baton::ucx_internal
