#include "baton/examples/final_params.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/tensor_parallel.h"

namespace baton::examples {

StatusOr<std::vector<ParamPiece>> FinalParamPieces(const scheduler::ModelLayout& layout,
                                                   scheduler::Executor& executor, int tp,
                                                   int tp_rank) {
  std::vector<ParamPiece> out;
  // The embedding and head are split by vocabulary rows
  // (scheduler/tensor_parallel.h).
  const bool vocab_parallel = true;
  for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b) {
    StatusOr<std::vector<float>> master = executor.ReadMaster(b);
    if (absl::IsOutOfRange(master.status())) continue;  // another stage's bucket
    BATON_RETURN_IF_ERROR(master.status());
    const scheduler::Bucket& bk = layout.buckets[b];
    const int64_t begin = layout.sharding.shard ? executor.shard_rank() * bk.shard_numel : 0;
    const int64_t end = begin + static_cast<int64_t>(master->size());
    for (const scheduler::ParamSlot& slot : bk.params) {
      const int64_t lo = std::max(begin, slot.offset);
      const int64_t hi = std::min(end, slot.offset + slot.numel);
      if (lo >= hi) continue;
      // Runs of consecutive elements of the whole parameter.
      const scheduler::TensorSplit split =
          tp > 1 ? scheduler::TensorSplitOf(slot.name, vocab_parallel)
                 : scheduler::TensorSplit::kReplicated;
      const int64_t whole =
          split == scheduler::TensorSplit::kReplicated ? slot.numel : slot.numel * tp;
      auto at = [&](int64_t i) {
        return scheduler::TensorWholeIndex(split, slot.shape, tp, tp_rank, i - slot.offset);
      };
      for (int64_t i = lo; i < hi;) {
        int64_t j = i + 1;
        while (j < hi && at(j) == at(i) + (j - i)) ++j;
        ParamPiece piece{slot.name, whole, at(i), {}};
        piece.values.assign(master->begin() + (i - begin), master->begin() + (j - begin));
        out.push_back(std::move(piece));
        i = j;
      }
    }
  }
  return out;
}

StatusOr<WholeParams> MergeParamPieces(const std::vector<std::vector<ParamPiece>>& ranks) {
  WholeParams whole;
  std::map<std::string, std::vector<bool>> have;
  for (const std::vector<ParamPiece>& pieces : ranks) {
    for (const ParamPiece& p : pieces) {
      std::vector<float>& w = whole[p.name];
      std::vector<bool>& h = have[p.name];
      w.resize(p.numel);
      h.resize(p.numel, false);
      for (size_t i = 0; i < p.values.size(); ++i) {
        w[p.offset + i] = p.values[i];
        h[p.offset + i] = true;
      }
    }
  }
  for (const auto& [name, h] : have) {
    if (std::find(h.begin(), h.end(), false) != h.end()) {
      return absl::InternalError(absl::StrCat("final parameters: no rank holds all of ", name));
    }
  }
  return whole;
}

StatusOr<double> MaxParamDifference(const WholeParams& run, const WholeParams& ref) {
  if (run.size() != ref.size()) {
    return absl::InternalError(absl::StrCat("final parameters: ", run.size(),
                                            " parameters against the reference's ", ref.size()));
  }
  double worst = 0;
  for (const auto& [name, values] : ref) {
    auto it = run.find(name);
    if (it == run.end() || it->second.size() != values.size()) {
      return absl::InternalError(absl::StrCat("final parameters: ", name, " differs in shape"));
    }
    double norm = 0, diff = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double d = double{it->second[i]} - values[i];
      norm += double{values[i]} * values[i];
      diff += d * d;
    }
    worst = std::max(worst, norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff));
  }
  return worst;
}

}  // namespace baton::examples
