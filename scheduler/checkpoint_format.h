// The on-disk format of a checkpoint (scheduler/checkpoint.h saves and
// loads it; docs/checkpoints.md describes it for users).
//
// A checkpoint is one directory, ROOT/step-NNNNNNNN (the step, 8 digits or
// more), holding:
//   rank-RRRRR-NONCE.bin   one data file per rank that wrote: chunks of
//                          fp32 little-endian values, back to back, no
//                          header (the manifest says what each holds);
//   rank-RRRRR-NONCE.json  that rank's part of the manifest (its file's
//                          size, checksums and chunks, and the header);
//   manifest.json          written last, by the rank that finds every
//                          part present: the header and every file. A
//                          directory without it is a partial save that
//                          loads ignore.
// NONCE (16 hex digits) is drawn by rank 0 for each save and broadcast, so
// the files of an earlier, interrupted save of the same step never mix
// with this one's.
//
// The manifest describes the state independently of the parallel layout:
//   header   step, data position (the trainer's), model name, policy
//            (its name and scheduler/policy_file.h JSON), mesh sizes,
//            world size, parameter dtype, block size, nonce;
//   tensors  the state tensor kinds and their dtype: master, moment1,
//            moment2, all "f32";
//   params   per parameter: name, global shape, element count;
//   files    per data file: name, writing rank, bytes, CRC-32C of the
//            whole file and of each block_bytes block, and its chunks:
//            (parameter index, tensor kind, global element range [begin,
//            end) of the flattened parameter, byte offset in the file),
//            or strided (the same, then stride and runs: version 2).
// For every (parameter, tensor) the chunks of all files tile [0, numel)
// exactly once; ManifestFromJson refuses a manifest where they do not. The
// manifest carries its own CRC-32C (over its JSON without that field).
//
// Pipeline stages and tensor slices (scheduler/checkpoint_plan.h): a
// stage's ranks write the chunks of the parameters their stage holds; a
// tensor rank's chunks are ranges of the whole parameter (a slice of
// columns: strided chunks), and params are the whole model's.
//
// Extending it (other shard kinds): quantized optimizer state adds tensor
// kinds with their own dtype (and its scales as one more kind); adapters
// are more parameters.
// A reader refuses a version or a tensor kind it does not know.
//
// Plain data and pure functions; thread-safe.
#ifndef BATON_SCHEDULER_CHECKPOINT_FORMAT_H_
#define BATON_SCHEDULER_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint_fs.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/mesh.h"

namespace baton::scheduler {

// A manifest or part with strided chunks (below) is version 2 (a reader
// of version 1 refuses it); one without, version 1, as before they were.
inline constexpr int kCheckpointVersion = 1;
inline constexpr int kCheckpointStridedVersion = 2;
inline constexpr int64_t kCheckpointBlockBytes = int64_t{4} << 20;
inline constexpr char kManifestName[] = "manifest.json";

// The saved state tensors of every parameter (fp32).
enum class StateTensor : uint8_t { kMaster, kMoment1, kMoment2 };
inline constexpr int kNumStateTensors = 3;
const char* StateTensorName(StateTensor t);  // "master", "moment1", "moment2"

struct CheckpointParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

// Elements [begin, end) of tensor `tensor` of parameter `param` (an index
// into the header's params), at byte `offset` of its file. Strided (runs >
// 1): `runs` runs of end - begin elements, run k elements [begin + k x
// stride, end + k x stride), back to back from `offset` (a block of
// columns of a row-major matrix over `runs` rows: a tensor rank's slice of
// a row-parallel weight; stride >= end - begin).
struct CheckpointChunk {
  int param = 0;
  StateTensor tensor = StateTensor::kMaster;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t offset = 0;
  int64_t stride = 0;
  int64_t runs = 1;
  int64_t bytes() const { return (end - begin) * runs * 4; }
  // The first element of run k, and the byte offset of its values.
  int64_t run_begin(int64_t k) const { return begin + k * stride; }
  int64_t run_offset(int64_t k) const { return offset + k * (end - begin) * 4; }
};

struct CheckpointFileInfo {
  std::string name;  // in the checkpoint's directory
  int rank = 0;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<uint32_t> block_crc32c;  // ceil(bytes / block_bytes)
  std::vector<CheckpointChunk> chunks;
};

struct CheckpointHeader {
  int64_t step = 0;
  int64_t data_position = 0;
  std::string model;
  std::string policy_name;
  std::string policy_json = "{}";  // a JSON object: scheduler/policy_file.h
  MeshSizes mesh;
  int world_size = 1;
  std::string param_dtype;
  uint64_t nonce = 0;
  int64_t block_bytes = kCheckpointBlockBytes;
  std::vector<CheckpointParam> params;
};

struct Manifest {
  CheckpointHeader header;
  std::vector<CheckpointFileInfo> files;
};

// The parameters of a layout in model order (units forward, each unit's
// parameters in order, a tied weight once).
std::vector<CheckpointParam> CheckpointParams(const ModelLayout& layout);

// "step-00000010"; the step of such a name, or -1.
std::string StepDirName(int64_t step);
int64_t StepOfDirName(absl::string_view name);
// "rank-00003-0123456789abcdef" (+ ".bin" / ".json").
std::string RankFileStem(int rank, uint64_t nonce);

// The manifest as JSON text (deterministic: the same manifest gives the
// same bytes), with its CRC.
std::string ManifestToJson(const Manifest& m);
// Parses and validates (see above); `what` names the file in errors:
// InvalidArgument "<what>: ..." naming the field or the broken invariant.
StatusOr<Manifest> ManifestFromJson(absl::string_view text, absl::string_view what);

// One rank's part: the header and its file.
std::string PartToJson(const CheckpointHeader& h, const CheckpointFileInfo& f);
struct ManifestPart {
  CheckpointHeader header;
  CheckpointFileInfo file;
};
StatusOr<ManifestPart> PartFromJson(absl::string_view text, absl::string_view what);

// The checkpoint directory `path` names: `path` itself when it holds a
// manifest, else its step-N subdirectory of the highest N that holds one.
// NotFound naming `path` when there is none (mentioning partial saves
// found without a manifest).
StatusOr<std::string> FindCheckpoint(CheckpointFs& fs, const std::string& path);

// Reads and validates dir/manifest.json.
StatusOr<Manifest> ReadManifest(CheckpointFs& fs, const std::string& dir);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_FORMAT_H_
