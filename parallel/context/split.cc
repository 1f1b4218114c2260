#include "baton/parallel/context/split.h"

#include "absl/strings/str_cat.h"

namespace baton::context {
namespace {

Status CheckCopy(const char* op, int64_t batch, size_t row_bytes, const void* from,
                 const void* to) {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": batch must be positive, got ", batch));
  }
  if (row_bytes == 0) return absl::InvalidArgumentError(absl::StrCat(op, ": row_bytes is 0"));
  if (from == nullptr || to == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": a buffer is null"));
  }
  return absl::OkStatus();
}

// Copies the two chunks of `rank` of every sequence from full sequences to
// its local rows (from_full), or back.
Status CopyRank(Stream& stream, const ContextSplit& split, int rank, int64_t batch,
                size_t row_bytes, const void* src, void* dst, bool from_full) {
  const size_t chunk_bytes = split.chunk() * row_bytes;
  for (int64_t b = 0; b < batch; ++b) {
    for (int slot = 0; slot < 2; ++slot) {
      const size_t f =
          (b * split.seq() + split.ChunkOf(rank, slot) * split.chunk()) * row_bytes;
      const size_t l = (b * split.local_seq() + slot * split.chunk()) * row_bytes;
      BATON_RETURN_IF_ERROR(stream.MemcpyAsync(static_cast<char*>(dst) + (from_full ? l : f),
                                               static_cast<const char*>(src) + (from_full ? f : l),
                                               chunk_bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<ContextSplit> ContextSplit::Create(int64_t seq, int cp) {
  if (cp < 1) return absl::InvalidArgumentError(absl::StrCat("cp must be positive, got ", cp));
  if (seq < 1) return absl::InvalidArgumentError(absl::StrCat("seq must be positive, got ", seq));
  if (seq % (2 * int64_t{cp}) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("seq ", seq, " does not split into 2 x cp = ",
                                                   2 * int64_t{cp}, " equal chunks"));
  }
  return ContextSplit(seq, cp);
}

std::vector<int64_t> ContextSplit::Positions(int rank) const {
  std::vector<int64_t> p(local_seq());
  for (int64_t row = 0; row < local_seq(); ++row) p[row] = Position(rank, row);
  return p;
}

Status ContextSplit::CheckRank(int rank) const {
  if (rank < 0 || rank >= cp_) {
    return absl::InvalidArgumentError(
        absl::StrCat("context rank ", rank, " is outside the group of cp = ", cp_));
  }
  return absl::OkStatus();
}

Status SplitSequence(Stream& stream, const ContextSplit& split, int rank, int64_t batch,
                     size_t row_bytes, const void* full, void* local) {
  BATON_RETURN_IF_ERROR(CheckCopy("SplitSequence", batch, row_bytes, full, local));
  BATON_RETURN_IF_ERROR(split.CheckRank(rank));
  return CopyRank(stream, split, rank, batch, row_bytes, full, local, true);
}

Status UnsplitSequence(Stream& stream, const ContextSplit& split, int64_t batch,
                       size_t row_bytes, const void* by_rank, void* full) {
  BATON_RETURN_IF_ERROR(CheckCopy("UnsplitSequence", batch, row_bytes, by_rank, full));
  const size_t rank_bytes = batch * split.local_seq() * row_bytes;
  for (int r = 0; r < split.cp(); ++r) {
    BATON_RETURN_IF_ERROR(CopyRank(stream, split, r, batch, row_bytes,
                                   static_cast<const char*>(by_rank) + r * rank_bytes, full,
                                   false));
  }
  return absl::OkStatus();
}

Status SplitAllRanks(Stream& stream, const ContextSplit& split, int64_t batch,
                     size_t row_bytes, const void* full, void* by_rank) {
  BATON_RETURN_IF_ERROR(CheckCopy("SplitAllRanks", batch, row_bytes, full, by_rank));
  const size_t rank_bytes = batch * split.local_seq() * row_bytes;
  for (int r = 0; r < split.cp(); ++r) {
    BATON_RETURN_IF_ERROR(CopyRank(stream, split, r, batch, row_bytes, full,
                                   static_cast<char*>(by_rank) + r * rank_bytes, true));
  }
  return absl::OkStatus();
}

Status GatherSequence(Communicator& group, Stream& stream, const ContextSplit& split,
                      int64_t batch, size_t row_elems, DataType type, const void* local,
                      void* scratch, void* full, const CollectiveOptions& options) {
  if (group.size() != split.cp()) {
    return absl::InvalidArgumentError(absl::StrCat("GatherSequence: the group has ",
                                                   group.size(), " ranks but cp is ",
                                                   split.cp()));
  }
  const size_t row_bytes = row_elems * DataTypeSize(type);
  BATON_RETURN_IF_ERROR(CheckCopy("GatherSequence", batch, row_bytes, local, full));
  if (scratch == nullptr) return absl::InvalidArgumentError("GatherSequence: scratch is null");
  BATON_RETURN_IF_ERROR(group.AllGather(local, scratch, batch * split.local_seq() * row_elems,
                                        type, stream, options));
  return UnsplitSequence(stream, split, batch, row_bytes, scratch, full);
}

}  // namespace baton::context
