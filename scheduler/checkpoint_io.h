// The file work of checkpoints (scheduler/checkpoint.h): one rank's writer
// (its data file, its part of the manifest, the commit of the manifest by
// the last rank to finish), run on a background thread, and the verified
// reads of a load. The format: scheduler/checkpoint_format.h.
//
// A save's files, in order (each through WriteFileAtomically's temporary
// name, fsync, rename, fsync of the directory, or for the data file the
// same steps streamed):
//   1. the step directory (mkdir -p, fsync of the root);
//   2. rank-R-NONCE.bin, its CRC-32C computed while it is written;
//   3. rank-R-NONCE.json, the rank's part;
//   4. the commit: the rank lists the directory; when it finds the parts
//      of every rank of this save (its nonce), it writes manifest.json from
//      them, then removes the files of other nonces (an interrupted earlier
//      save of this step, a checkpoint this one replaces). Every rank lists
//      after its own part is durable, so the last one to finish sees every
//      part; two ranks that both see them write the same bytes.
// A kill at any point leaves either no manifest.json in the directory (a
// partial save, ignored by FindCheckpoint) or a complete one whose files
// are all durable; an earlier complete checkpoint of the same step stays
// whole until the new manifest replaces its manifest.
//
// Reads verify the CRC of every block they touch and the file's size;
// DataLoss names the file and the block otherwise.
//
// Thread safety: SaveWriter is driven by one thread (it runs its job on
// its own); the free functions are thread-safe for distinct files.
#ifndef BATON_SCHEDULER_CHECKPOINT_IO_H_
#define BATON_SCHEDULER_CHECKPOINT_IO_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/checkpoint_fs.h"
#include "baton/scheduler/checkpoint_plan.h"

namespace baton::scheduler {


// One rank's writer work for one save. `staging` and `plan` must stay valid
// and unchanged until the job ends; `wait_copies` blocks until the staging
// holds the state and *nonce the save's nonce.
struct SaveJob {
  CheckpointFs* fs = nullptr;
  std::string root;
  CheckpointHeader header;  // nonce set from *nonce after wait_copies
  int rank = 0;
  const RankSavePlan* plan = nullptr;
  const char* staging = nullptr;
  const uint64_t* nonce = nullptr;
  std::function<Status()> wait_copies;
  std::chrono::steady_clock::time_point issued;
};

// Runs a job on the calling thread; fills stats as it goes.
Status RunSaveJob(const SaveJob& job, SaveStats* stats);

// Runs one job at a time on a thread of its own.
class SaveWriter {
 public:
  SaveWriter();
  ~SaveWriter();  // finishes the running job, then joins
  SaveWriter(const SaveWriter&) = delete;
  SaveWriter& operator=(const SaveWriter&) = delete;

  // Starts `job`; the writer must be idle (after Wait).
  void Start(SaveJob job, SaveStats initial);
  // Blocks until the started job (if any) has ended; its status (OK when
  // none ran) and stats.
  Status Wait(SaveStats* stats);
  bool busy();

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool has_job_ = false, running_ = false, stop_ = false;
  SaveJob job_;
  SaveStats stats_;
  Status status_;
  std::thread thread_;
};

// Reads `pieces` (sorted by file and offset) of the checkpoint in `dir`:
// each piece's bytes go to dest(piece). Checks each file's size and the CRC
// of every block read: DataLoss naming the file (and block) otherwise;
// NotFound naming a missing file.
Status ReadPieces(CheckpointFs& fs, const std::string& dir, const Manifest& m,
                  const std::vector<LoadPiece>& pieces,
                  const std::function<char*(const LoadPiece&)>& dest);

// Reads file `file` whole and checks its size, every block's CRC and the
// whole file's CRC.
Status VerifyFile(CheckpointFs& fs, const std::string& dir, const Manifest& m, int file);

// The whole of one state tensor of parameter `param` (an index into the
// manifest's params), verified as ReadPieces does.
StatusOr<std::vector<float>> ReadTensor(CheckpointFs& fs, const std::string& dir,
                                        const Manifest& m, int param, StateTensor tensor);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_IO_H_
