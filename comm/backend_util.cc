#include "baton/comm/backend_util.h"

#include "absl/strings/str_cat.h"

namespace baton {

CollectiveHeader MakeHeader(CollectiveKind kind, size_t count, DataType type,
                            ReduceOp op, int root,
                            const CollectiveOptions& options, uint64_t seq) {
  CollectiveHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.type = static_cast<uint8_t>(type);
  h.op = static_cast<uint8_t>(op);
  h.accumulate_fp32 = options.accumulate_fp32 ? 1 : 0;
  h.root = root;
  h.tag = options.tag;
  h.seq = seq;
  h.count = count;
  return h;
}

std::string CollectiveLabel(const CollectiveHeader& h) {
  return absl::StrCat(CollectiveName(static_cast<CollectiveKind>(h.kind)),
                      " #", h.seq, " (tag ", h.tag, ")");
}

std::string DescribeMismatch(const CollectiveHeader& a, int rank_a,
                             const CollectiveHeader& b, int rank_b) {
  auto differ = [&](const char* what, const std::string& va,
                    const std::string& vb) {
    return absl::StrCat("rank ", rank_a, " has ", what, " ", va, " but rank ",
                        rank_b, " has ", what, " ", vb);
  };
  if (a.magic != b.magic) return differ("header magic", "ok", "garbage");
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

}  // namespace baton
