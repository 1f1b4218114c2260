#include "baton/scheduler/schedule_check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/comm/flight_recorder.h"
#include "baton/comm/hang_report.h"
#include "baton/scheduler/streams.h"

namespace baton::scheduler {
namespace {

constexpr size_t kEntryWords = 4;
constexpr uint64_t kNone = ~uint64_t{0};

void Pack(const ScheduleEntry& e, uint64_t* w) {
  w[0] = uint64_t{static_cast<uint8_t>(e.kind)} | uint64_t{e.group} << 8 |
         uint64_t{e.tag & 0xff} << 16 |
         uint64_t{static_cast<uint8_t>(e.in_type)} << 24 |
         uint64_t{static_cast<uint8_t>(e.out_type)} << 32 |
         (static_cast<uint64_t>(e.node) & 0xffffff) << 40;
  w[1] = static_cast<uint64_t>(static_cast<int64_t>(e.bucket));
  w[2] = static_cast<uint64_t>(e.in_numel);
  w[3] = static_cast<uint64_t>(e.out_numel);
}

ScheduleEntry Unpack(const uint64_t* w) {
  ScheduleEntry e;
  e.kind = static_cast<NodeKind>(w[0] & 0xff);
  e.group = static_cast<uint8_t>((w[0] >> 8) & 0xff);
  e.tag = static_cast<uint32_t>((w[0] >> 16) & 0xff);
  e.in_type = static_cast<DataType>((w[0] >> 24) & 0xff);
  e.out_type = static_cast<DataType>((w[0] >> 32) & 0xff);
  e.node = static_cast<int>((w[0] >> 40) & 0xffffff);
  e.bucket = static_cast<int>(static_cast<int64_t>(w[1]));
  e.in_numel = static_cast<int64_t>(w[2]);
  e.out_numel = static_cast<int64_t>(w[3]);
  return e;
}

// One blocking collective on host words through `device`'s memory:
// all-gather (`words` per rank) or broadcast from `root`.
StatusOr<std::vector<uint64_t>> Exchange(Communicator& comm, Device& device,
                                         uint32_t tag, CollectiveKind kind,
                                         const std::vector<uint64_t>& mine,
                                         int root) {
  const size_t words = mine.size();
  const size_t out_words =
      kind == CollectiveKind::kAllGather ? words * comm.size() : words;
  const size_t bytes = 8 * (words + out_words);
  BATON_ASSIGN_OR_RETURN(DeviceBuffer buf, device.Allocate(std::max<size_t>(bytes, 8)));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, device.CreateStream());
  char* in = static_cast<char*>(buf.data());
  char* out = in + 8 * words;
  if (words > 0) BATON_RETURN_IF_ERROR(s->MemcpyAsync(in, mine.data(), 8 * words));
  CollectiveOptions o;
  o.tag = tag;
  const size_t count = 2 * words;  // int32 halves of each word
  if (kind == CollectiveKind::kAllGather) {
    BATON_RETURN_IF_ERROR(comm.AllGather(in, out, count, DataType::kI32, *s, o));
  } else {
    BATON_RETURN_IF_ERROR(
        comm.Broadcast(in, out, count, DataType::kI32, root, *s, o));
  }
  std::vector<uint64_t> result(out_words);
  if (out_words > 0) {
    BATON_RETURN_IF_ERROR(s->MemcpyAsync(result.data(), out, 8 * out_words));
  }
  BATON_RETURN_IF_ERROR(s->Synchronize());
  return result;
}

std::string KindText(const ScheduleEntry& e) {
  switch (e.kind) {
    case NodeKind::kAllGather:
      return "all_gather";
    case NodeKind::kReduceScatter:
      return "reduce_scatter";
    case NodeKind::kAllReduce:
      return "all_reduce";
    default:
      return NodeKindName(e.kind);
  }
}

}  // namespace

bool operator==(const ScheduleEntry& a, const ScheduleEntry& b) {
  return a.node == b.node && a.kind == b.kind && a.group == b.group &&
         a.bucket == b.bucket && a.tag == b.tag && a.in_numel == b.in_numel &&
         a.out_numel == b.out_numel && a.in_type == b.in_type &&
         a.out_type == b.out_type;
}

bool IsCollective(const Node& n) {
  return n.kind == NodeKind::kAllGather || n.kind == NodeKind::kReduceScatter ||
         n.kind == NodeKind::kAllReduce;
}

SchedulePosition NodePosition(const StepGraph& graph, int node, int64_t step,
                              bool check) {
  const Node& n = graph.nodes[node];
  SchedulePosition p;
  p.step = step;
  p.node = node;
  p.bucket = n.bucket;
  p.group = n.group.bits();
  p.check = check;
  return p;
}

std::vector<ScheduleEntry> CollectiveSchedule(const StepGraph& graph) {
  std::vector<ScheduleEntry> out;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (!IsCollective(n)) continue;
    ScheduleEntry e;
    e.node = static_cast<int>(i);
    e.kind = n.kind;
    e.group = n.group.bits();
    e.bucket = n.bucket;
    e.tag = CollectiveTag(n.stream);
    if (!n.reads.empty()) {
      e.in_numel = graph.buffers[n.reads[0]].numel;
      e.in_type = graph.buffers[n.reads[0]].dtype;
    }
    if (!n.writes.empty()) {
      e.out_numel = graph.buffers[n.writes[0]].numel;
      e.out_type = graph.buffers[n.writes[0]].dtype;
    }
    out.push_back(e);
  }
  return out;
}

uint64_t ScheduleHash(const std::vector<ScheduleEntry>& schedule) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the packed words
  for (const ScheduleEntry& e : schedule) {
    uint64_t w[kEntryWords];
    Pack(e, w);
    for (uint64_t x : w) {
      for (int b = 0; b < 8; ++b) {
        h ^= (x >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    }
  }
  return h;
}

std::string DescribeEntry(const ScheduleEntry& e) {
  return absl::StrCat(KindText(e), " of bucket ", e.bucket, " over ",
                      MeshGroupBitsName(e.group), " (node ", e.node, ", tag ",
                      e.tag, "), ", e.in_numel, " x ", DataTypeName(e.in_type),
                      " -> ", e.out_numel, " x ", DataTypeName(e.out_type));
}

StatusOr<std::vector<uint64_t>> AllGatherWords(Communicator& comm,
                                               Device& device, uint32_t tag,
                                               const std::vector<uint64_t>& mine) {
  return Exchange(comm, device, tag, CollectiveKind::kAllGather, mine, 0);
}

Status CheckSchedule(const std::vector<ScheduleEntry>& schedule,
                     Communicator& comm, Device& device) {
  const int world = comm.size();
  const uint64_t n = schedule.size();
  BATON_ASSIGN_OR_RETURN(
      std::vector<uint64_t> all,
      Exchange(comm, device, kScheduleCheckTag, CollectiveKind::kAllGather,
               {ScheduleHash(schedule), n}, 0));
  // The schedule most ranks hold (ties: the lowest rank's).
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> holders;
  for (int q = 0; q < world; ++q) holders[{all[2 * q], all[2 * q + 1]}].push_back(q);
  if (holders.size() == 1) return Status();
  const std::vector<int>* major = nullptr;
  for (const auto& [key, ranks] : holders) {
    if (major == nullptr || ranks.size() > major->size() ||
        (ranks.size() == major->size() && ranks[0] < (*major)[0])) {
      major = &ranks;
    }
  }
  const int ref = (*major)[0];
  const uint64_t n_ref = all[2 * ref + 1];
  // The reference schedule to every rank; each finds where it departs.
  std::vector<uint64_t> ref_words(kEntryWords * n_ref, 0);
  if (comm.rank() == ref) {
    for (uint64_t i = 0; i < n_ref; ++i) Pack(schedule[i], &ref_words[kEntryWords * i]);
  }
  BATON_ASSIGN_OR_RETURN(
      ref_words, Exchange(comm, device, kScheduleCheckTag,
                          CollectiveKind::kBroadcast, ref_words, ref));
  uint64_t d = kNone;
  for (uint64_t i = 0; i < std::max(n, n_ref) && d == kNone; ++i) {
    if (i >= n || i >= n_ref || !(schedule[i] == Unpack(&ref_words[kEntryWords * i]))) {
      d = i;
    }
  }
  std::vector<uint64_t> mine(2 + kEntryWords, 0);
  mine[0] = d;
  if (d != kNone && d < n) {
    mine[1] = 1;
    Pack(schedule[d], &mine[2]);
  }
  BATON_ASSIGN_OR_RETURN(std::vector<uint64_t> where,
                         Exchange(comm, device, kScheduleCheckTag,
                                  CollectiveKind::kAllGather, mine, 0));
  // Every rank words the same message from the same data.
  const size_t stride = 2 + kEntryWords;
  std::vector<int> differ;
  for (int q = 0; q < world; ++q) {
    if (where[stride * q] != kNone) differ.push_back(q);
  }
  if (differ.empty()) {
    return absl::InternalError("schedule check: hashes differ but no rank "
                               "found a differing collective");
  }
  const int r = differ[0];
  const uint64_t at = where[stride * r];
  const std::string theirs =
      where[stride * r + 1] != 0
          ? DescribeEntry(Unpack(&where[stride * r + 2]))
          : absl::StrCat("no collective there (its schedule has ",
                         all[2 * r + 1], ")");
  const std::string expected =
      at < n_ref ? DescribeEntry(Unpack(&ref_words[kEntryWords * at]))
                 : absl::StrCat("no collective there (its schedule has ",
                                n_ref, ")");
  return absl::InvalidArgumentError(absl::StrCat(
      "schedule check: rank ", r, "'s schedule differs from rank ", ref,
      "'s (held by ranks ", RankList(*major), ") at collective ", at, " of ",
      n_ref, ": rank ", ref, " has ", expected, ", rank ", r, " has ", theirs,
      differ.size() > 1
          ? absl::StrCat("; ranks with another schedule: ", RankList(differ))
          : std::string()));
}

}  // namespace baton::scheduler
