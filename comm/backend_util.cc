#include "baton/comm/backend_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace baton {

CollectiveHeader MakeHeader(CollectiveKind kind, size_t count, DataType type,
                            ReduceOp op, int root,
                            const CollectiveOptions& options, uint64_t seq) {
  CollectiveHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.type = static_cast<uint8_t>(type);
  h.op = static_cast<uint8_t>(op);
  // The maximum is exact in any type: never widened.
  h.accumulate_fp32 = options.accumulate_fp32 && op != ReduceOp::kMax ? 1 : 0;
  h.root = root;
  h.tag = options.tag;
  h.seq = seq;
  h.count = count;
  const SchedulePosition& p = options.position;
  h.step = p.step;
  h.node = p.node;
  h.bucket = p.bucket;
  h.group = p.group;
  h.check = p.check ? 1 : 0;
  return h;
}

namespace {
std::string PositionText(const CollectiveHeader& h) {
  std::string out;
  if (h.step >= 0) absl::StrAppend(&out, " step ", h.step);
  if (h.node >= 0) absl::StrAppend(&out, " node ", h.node);
  if (h.bucket >= 0) absl::StrAppend(&out, " bucket ", h.bucket);
  if (h.group != 0) absl::StrAppend(&out, " group ", MeshGroupBitsName(h.group));
  return out;
}
}  // namespace

std::string CollectiveLabel(const CollectiveHeader& h) {
  return absl::StrCat(CollectiveName(static_cast<CollectiveKind>(h.kind)),
                      " #", h.seq, " (tag ", h.tag, ")", PositionText(h));
}

CollectiveCall CallOf(const CollectiveHeader& h) {
  CollectiveCall c;
  c.kind = static_cast<CollectiveKind>(h.kind);
  c.type = static_cast<DataType>(h.type);
  c.op = static_cast<ReduceOp>(h.op);
  c.root = h.root;
  c.count = h.count;
  c.tag = h.tag;
  c.seq = h.seq;
  return c;
}

std::vector<int> WorldRanks(const CommConfig& config) {
  if (!config.world_ranks.empty()) return config.world_ranks;
  std::vector<int> w(config.size);
  for (int r = 0; r < config.size; ++r) w[r] = r;
  return w;
}

Status ValidateWorldRanks(const CommConfig& config) {
  const std::vector<int>& w = config.world_ranks;
  if (w.empty()) return Status();
  std::vector<int> sorted = w;
  std::sort(sorted.begin(), sorted.end());
  if (static_cast<int>(w.size()) != config.size || sorted.front() < 0 ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CommConfig::world_ranks must hold ", config.size,
        " distinct ranks >= 0 (one per rank), got ", w.size()));
  }
  return Status();
}

Recording StartRecording(const CommConfig& config, const char* backend) {
  Recording r;
  r.recorder = config.recorder != nullptr ? config.recorder
                                          : std::make_shared<FlightRecorder>();
  r.comm = r.recorder->AddCommunicator(config.group, config.rank,
                                       WorldRanks(config), backend);
  return r;
}

std::vector<int> ChildWorldRanks(
    const std::vector<std::pair<int, int>>& colour_key, int rank,
    const std::vector<int>& parent_world_ranks) {
  const int colour = colour_key[rank].first;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (size_t q = 0; q < colour_key.size(); ++q) {
    if (colour_key[q].first == colour) {
      members.push_back({colour_key[q].second, static_cast<int>(q)});
    }
  }
  std::sort(members.begin(), members.end());
  std::vector<int> out;
  for (const auto& [key, q] : members) {
    out.push_back(q < static_cast<int>(parent_world_ranks.size())
                      ? parent_world_ranks[q]
                      : q);
  }
  return out;
}

std::string DescribeMismatch(const CollectiveHeader& a, int rank_a,
                             const CollectiveHeader& b, int rank_b) {
  auto differ = [&](const char* what, const std::string& va,
                    const std::string& vb) {
    return absl::StrCat("rank ", rank_a, " has ", what, " ", va, " but rank ",
                        rank_b, " has ", what, " ", vb);
  };
  if (a.magic != b.magic) return differ("header magic", "ok", "garbage");
  // Check mode: the schedule's positions first (a skipped collective shows
  // as the next one's position, often with the same kind and count).
  if (a.check != 0 && b.check != 0 &&
      (a.step != b.step || a.node != b.node || a.bucket != b.bucket ||
       a.group != b.group)) {
    return absl::StrCat("rank ", rank_a, " is at", PositionText(a), " (",
                        CollectiveName(static_cast<CollectiveKind>(a.kind)),
                        ") but rank ", rank_b, " is at", PositionText(b), " (",
                        CollectiveName(static_cast<CollectiveKind>(b.kind)),
                        ") of the schedule");
  }
  if (a.kind != b.kind) {
    return differ("collective",
                  CollectiveName(static_cast<CollectiveKind>(a.kind)),
                  CollectiveName(static_cast<CollectiveKind>(b.kind)));
  }
  if (a.seq != b.seq) {
    return differ("sequence number", absl::StrCat(a.seq),
                  absl::StrCat(b.seq));
  }
  const auto kind = static_cast<CollectiveKind>(a.kind);
  if (kind == CollectiveKind::kBarrier) return "";
  if (a.count != b.count) {
    return differ("count", absl::StrCat(a.count), absl::StrCat(b.count));
  }
  if (a.type != b.type) {
    return differ("data type", DataTypeName(static_cast<DataType>(a.type)),
                  DataTypeName(static_cast<DataType>(b.type)));
  }
  const bool reduces = kind == CollectiveKind::kReduceScatter ||
                       kind == CollectiveKind::kAllReduce;
  if (reduces && a.op != b.op) {
    return differ("reduction", ReduceOpName(static_cast<ReduceOp>(a.op)),
                  ReduceOpName(static_cast<ReduceOp>(b.op)));
  }
  if (reduces && a.accumulate_fp32 != b.accumulate_fp32) {
    return differ("accumulate_fp32", absl::StrCat(int{a.accumulate_fp32}),
                  absl::StrCat(int{b.accumulate_fp32}));
  }
  if (kind == CollectiveKind::kBroadcast && a.root != b.root) {
    return differ("root", absl::StrCat(a.root), absl::StrCat(b.root));
  }
  return "";
}

SplitPlace PlaceInSplit(const std::vector<std::pair<int, int>>& colour_key,
                        int rank) {
  const int colour = colour_key[rank].first;
  const int key = colour_key[rank].second;
  SplitPlace p;
  for (size_t q = 0; q < colour_key.size(); ++q) {
    if (colour_key[q].first != colour) continue;
    ++p.size;
    const int kq = colour_key[q].second;
    if (kq < key || (kq == key && static_cast<int>(q) < rank)) ++p.rank;
  }
  return p;
}

CollectiveHeader P2PHeader(const P2POp& op, const CollectiveOptions& options,
                           uint64_t seq) {
  return MakeHeader(op.kind == P2POp::Kind::kSend ? CollectiveKind::kSend
                                                  : CollectiveKind::kRecv,
                    op.count, op.type, ReduceOp::kSum, op.peer, options, seq);
}

std::string P2PLabel(const P2POp& op, uint32_t tag, uint64_t seq) {
  const bool send = op.kind == P2POp::Kind::kSend;
  return absl::StrCat(send ? "send #" : "recv #", seq, " (tag ", tag, ") ",
                      send ? "to" : "from", " rank ", op.peer, ", ",
                      op.bytes(), " bytes");
}

uint64_t RecordP2P(const Recording& rec, const P2POp& op,
                   const CollectiveOptions& options, uint64_t seq,
                   const std::vector<int>& world_ranks) {
  SchedulePosition p = options.position;
  p.peer = op.peer < static_cast<int>(world_ranks.size())
               ? world_ranks[op.peer]
               : op.peer;
  return rec.Issue(P2PHeader(op, options, seq), p);
}

}  // namespace baton
