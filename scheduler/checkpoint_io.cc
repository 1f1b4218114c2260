#include "baton/scheduler/checkpoint_io.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/runtime/crc32c.h"

namespace baton::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Appends to a file through a buffer, computing the CRC of each block and
// of the whole file.
class CrcWriter {
 public:
  CrcWriter(WritableFile& f, int64_t block) : f_(f), block_(block) { buf_.reserve(kBuffer); }
  Status Append(const char* p, size_t n) {
    size_t left = n;
    const char* q = p;
    while (left > 0) {
      const size_t take = std::min<size_t>(left, static_cast<size_t>(block_ - in_block_));
      cur_ = Crc32cExtend(cur_, q, take);
      whole_ = Crc32cExtend(whole_, q, take);
      in_block_ += static_cast<int64_t>(take);
      if (in_block_ == block_) {
        blocks_.push_back(cur_);
        cur_ = 0;
        in_block_ = 0;
      }
      q += take;
      left -= take;
    }
    bytes_ += static_cast<int64_t>(n);
    // Large chunks go straight from staging to the file; small ones (norm
    // weights, a bucket's edges) are gathered into one write.
    if (n >= kDirect || buf_.size() + n > kBuffer) BATON_RETURN_IF_ERROR(Flush());
    if (n >= kDirect) return f_.Append(p, n);
    buf_.append(p, n);
    return absl::OkStatus();
  }
  Status Finish() {
    if (in_block_ > 0) blocks_.push_back(cur_);
    in_block_ = 0;
    return Flush();
  }
  int64_t bytes() const { return bytes_; }
  uint32_t crc() const { return whole_; }
  const std::vector<uint32_t>& blocks() const { return blocks_; }

 private:
  static constexpr size_t kBuffer = size_t{8} << 20;
  static constexpr size_t kDirect = size_t{1} << 20;
  Status Flush() {
    if (buf_.empty()) return absl::OkStatus();
    Status st = f_.Append(buf_.data(), buf_.size());
    buf_.clear();
    return st;
  }
  WritableFile& f_;
  const int64_t block_;
  std::string buf_;
  uint32_t cur_ = 0, whole_ = 0;
  int64_t in_block_ = 0, bytes_ = 0;
  std::vector<uint32_t> blocks_;
};

// Streams the rank's data file through a temporary name; fills `info`.
Status WriteDataFile(const SaveJob& job, const std::string& dir, const std::string& name,
                     CheckpointFileInfo* info) {
  CheckpointFs& fs = *job.fs;
  const std::string tmp = JoinPath(dir, absl::StrCat(".", name, ".tmp"));
  Status st = [&]() -> Status {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, fs.Create(tmp));
    CrcWriter w(*f, job.header.block_bytes);
    for (const SaveChunk& c : job.plan->chunks) {
      BATON_RETURN_IF_ERROR(w.Append(job.staging + c.staging_offset, c.chunk.bytes()));
      info->chunks.push_back(c.chunk);
    }
    BATON_RETURN_IF_ERROR(w.Finish());
    BATON_RETURN_IF_ERROR(f->Sync());
    BATON_RETURN_IF_ERROR(f->Close());
    info->bytes = w.bytes();
    info->crc32c = w.crc();
    info->block_crc32c = w.blocks();
    BATON_RETURN_IF_ERROR(fs.Rename(tmp, JoinPath(dir, name)));
    return fs.SyncDir(dir);
  }();
  if (!st.ok()) (void)fs.Remove(tmp);
  return st;
}

// Writes manifest.json when every rank's part of this save is there.
Status TryCommit(const SaveJob& job, const std::string& dir, bool* committed) {
  CheckpointFs& fs = *job.fs;
  const uint64_t nonce = job.header.nonce;
  const std::string suffix = absl::StrFormat("-%016x.json", nonce);
  BATON_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.List(dir));
  std::vector<std::string> parts;
  for (const std::string& n : names) {
    if (absl::StartsWith(n, "rank-") && absl::EndsWith(n, suffix)) parts.push_back(n);
  }
  if (static_cast<int>(parts.size()) < job.header.world_size) return absl::OkStatus();
  Manifest m;
  std::string header_json;
  for (const std::string& n : parts) {
    const std::string path = JoinPath(dir, n);
    BATON_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(fs, path, int64_t{1} << 30));
    BATON_ASSIGN_OR_RETURN(ManifestPart part, PartFromJson(text, path));
    Manifest one{part.header, {}};
    const std::string h = ManifestToJson(one);
    if (header_json.empty()) {
      header_json = h;
      m.header = part.header;
    } else if (h != header_json) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ranks' parts disagree on the header (step, data position, policy or mesh): ",
          parts.front(), " and ", n));
    }
    m.files.push_back(std::move(part.file));
  }
  std::sort(m.files.begin(), m.files.end(),
            [](const CheckpointFileInfo& a, const CheckpointFileInfo& b) { return a.rank < b.rank; });
  const std::string text = ManifestToJson(m);
  // The same checks a load makes (every element saved once), before it is
  // visible.
  BATON_RETURN_IF_ERROR(ManifestFromJson(text, JoinPath(dir, kManifestName)).status());
  BATON_RETURN_IF_ERROR(WriteFileAtomically(
      fs, dir, kManifestName, absl::StrFormat(".manifest-%016x-r%d.tmp", nonce, job.rank), text));
  *committed = true;
  // Files of other saves of this step are garbage now (best effort).
  const std::string mine = absl::StrFormat("%016x", nonce);
  for (const std::string& n : names) {
    if (n != kManifestName && !absl::StrContains(n, mine)) (void)fs.Remove(JoinPath(dir, n));
  }
  return absl::OkStatus();
}

}  // namespace

Status RunSaveJob(const SaveJob& job, SaveStats* stats) {
  BATON_RETURN_IF_ERROR(job.wait_copies());
  stats->copied_ms = MsSince(job.issued);
  const double cpu0 = ThreadCpuMs();
  SaveJob j = job;
  j.header.nonce = *job.nonce;
  const std::string dir = JoinPath(job.root, StepDirName(job.header.step));
  stats->dir = dir;
  Status st = [&]() -> Status {
    BATON_RETURN_IF_ERROR(j.fs->MakeDirs(dir));
    BATON_RETURN_IF_ERROR(j.fs->SyncDir(job.root));
    const std::string stem = RankFileStem(job.rank, j.header.nonce);
    CheckpointFileInfo info;
    info.name = stem + ".bin";
    info.rank = job.rank;
    BATON_RETURN_IF_ERROR(WriteDataFile(j, dir, info.name, &info));
    stats->bytes = info.bytes;
    BATON_RETURN_IF_ERROR(WriteFileAtomically(*j.fs, dir, stem + ".json",
                                              absl::StrCat(".", stem, ".json.tmp"),
                                              PartToJson(j.header, info)));
    stats->written_ms = MsSince(job.issued);
    return TryCommit(j, dir, &stats->committed);
  }();
  stats->done_ms = MsSince(job.issued);
  stats->writer_cpu_ms = ThreadCpuMs() - cpu0;
  if (!st.ok()) {
    return Status(st.code(), absl::StrCat("checkpoint step ", job.header.step, " (", dir,
                                          "), rank ", job.rank, ": ", st.message()));
  }
  return st;
}

SaveWriter::SaveWriter() : thread_([this] { Loop(); }) {}

SaveWriter::~SaveWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SaveWriter::Start(SaveJob job, SaveStats initial) {
  std::lock_guard<std::mutex> lock(mu_);
  job_ = std::move(job);
  stats_ = std::move(initial);
  status_ = absl::OkStatus();
  has_job_ = true;
  running_ = true;
  cv_.notify_all();
}

Status SaveWriter::Wait(SaveStats* stats) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !running_; });
  if (stats != nullptr) *stats = stats_;
  return status_;
}

bool SaveWriter::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void SaveWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return has_job_ || stop_; });
    if (!has_job_) return;  // stop_ with nothing to run
    has_job_ = false;
    SaveJob job = job_;
    SaveStats stats = stats_;
    lock.unlock();
    Status st = RunSaveJob(job, &stats);
    lock.lock();
    stats_ = stats;
    status_ = st;
    running_ = false;
    cv_.notify_all();
  }
}

Status ReadPieces(CheckpointFs& fs, const std::string& dir, const Manifest& m,
                  const std::vector<LoadPiece>& pieces,
                  const std::function<char*(const LoadPiece&)>& dest) {
  const int64_t block = m.header.block_bytes;
  size_t i = 0;
  std::vector<char> buf;
  while (i < pieces.size()) {
    const CheckpointFileInfo& info = m.files[pieces[i].file];
    const std::string path = JoinPath(dir, info.name);
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, fs.Open(path));
    BATON_ASSIGN_OR_RETURN(const int64_t size, f->Size());
    if (size != info.bytes) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", path, " is ", size,
                                              " bytes; the manifest says ", info.bytes,
                                              size < info.bytes ? " (truncated)" : ""));
    }
    int64_t loaded = -1;  // the block in buf
    for (; i < pieces.size() && &m.files[pieces[i].file] == &info; ++i) {
      const LoadPiece& p = pieces[i];
      char* out = dest(p);
      for (int64_t at = p.file_offset; at < p.file_offset + p.bytes;) {
        const int64_t k = at / block;
        if (k != loaded) {
          const int64_t len = std::min(block, info.bytes - k * block);
          buf.resize(static_cast<size_t>(len));
          BATON_RETURN_IF_ERROR(f->ReadAt(k * block, buf.data(), buf.size()));
          const uint32_t crc = Crc32c(buf.data(), buf.size());
          if (crc != info.block_crc32c[k]) {
            return absl::DataLossError(absl::StrFormat(
                "checkpoint file %s: block %d (bytes [%d, %d)) fails its CRC-32C check "
                "(stored %08x, read %08x): the file is damaged",
                path, k, k * block, k * block + len, info.block_crc32c[k], crc));
          }
          loaded = k;
        }
        const int64_t end = std::min(p.file_offset + p.bytes, (k + 1) * block);
        std::memcpy(out + (at - p.file_offset), buf.data() + (at - k * block),
                    static_cast<size_t>(end - at));
        at = end;
      }
    }
  }
  return absl::OkStatus();
}

Status VerifyFile(CheckpointFs& fs, const std::string& dir, const Manifest& m, int file) {
  const CheckpointFileInfo& info = m.files[file];
  const std::string path = JoinPath(dir, info.name);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, fs.Open(path));
  BATON_ASSIGN_OR_RETURN(const int64_t size, f->Size());
  if (size != info.bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, " is ", size,
                                            " bytes; the manifest says ", info.bytes,
                                            size < info.bytes ? " (truncated)" : ""));
  }
  const int64_t block = m.header.block_bytes;
  std::vector<char> buf;
  uint32_t whole = 0;
  for (int64_t k = 0; k * block < info.bytes; ++k) {
    buf.resize(static_cast<size_t>(std::min(block, info.bytes - k * block)));
    BATON_RETURN_IF_ERROR(f->ReadAt(k * block, buf.data(), buf.size()));
    const uint32_t crc = Crc32c(buf.data(), buf.size());
    if (crc != info.block_crc32c[k]) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint file %s: block %d fails its CRC-32C check (stored %08x, read %08x): "
          "the file is damaged", path, k, info.block_crc32c[k], crc));
    }
    whole = Crc32cExtend(whole, buf.data(), buf.size());
  }
  if (whole != info.crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint file %s fails its CRC-32C check (stored %08x, read %08x)", path,
        info.crc32c, whole));
  }
  return absl::OkStatus();
}

StatusOr<std::vector<float>> ReadTensor(CheckpointFs& fs, const std::string& dir,
                                        const Manifest& m, int param, StateTensor tensor) {
  std::vector<float> out(static_cast<size_t>(m.header.params[param].numel));
  std::vector<LoadPiece> pieces;
  for (size_t f = 0; f < m.files.size(); ++f) {
    for (const CheckpointChunk& c : m.files[f].chunks) {
      if (c.param != param || c.tensor != tensor || c.end <= c.begin) continue;
      for (int64_t k = 0; k < c.runs; ++k) {
        pieces.push_back({static_cast<int>(f), c.run_offset(k), (c.end - c.begin) * 4, 0, tensor,
                          c.run_begin(k)});
      }
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const LoadPiece& x, const LoadPiece& y) {
    return x.file != y.file ? x.file < y.file : x.file_offset < y.file_offset;
  });
  BATON_RETURN_IF_ERROR(ReadPieces(fs, dir, m, pieces, [&](const LoadPiece& p) {
    return reinterpret_cast<char*>(out.data() + p.shard_elem);
  }));
  return out;
}

}  // namespace baton::scheduler
