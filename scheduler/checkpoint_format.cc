#include "baton/scheduler/checkpoint_format.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/runtime/crc32c.h"
#include "baton/runtime/json_input.h"
#include "baton/scheduler/limits.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler {
namespace {

using nlohmann::json;

// A parameter's elements (and a step count): scheduler/limits.h's bound on
// a model's parameters; a file's bytes: 12 bytes per element and more.
constexpr int64_t kMaxElems = kMaxModelParameters;
constexpr int64_t kMaxBytes = int64_t{1} << 56;

json HeaderJson(const CheckpointHeader& h) {
  json j;
  j["step"] = h.step;
  j["data_position"] = h.data_position;
  j["model"] = h.model;
  j["policy_name"] = h.policy_name;
  // The policy file's JSON (scheduler/policy_file.h) as an object.
  json policy = json::parse(h.policy_json, nullptr, /*allow_exceptions=*/false);
  j["policy"] = policy.is_object() ? policy : json::object();
  json mesh = json::object();
  for (MeshDim d : DefaultMeshOrder()) mesh[MeshDimName(d)] = h.mesh[d];
  j["mesh"] = mesh;
  j["world_size"] = h.world_size;
  j["param_dtype"] = h.param_dtype;
  j["nonce"] = absl::StrFormat("%016x", h.nonce);
  j["block_bytes"] = h.block_bytes;
  json tensors = json::object();
  for (int t = 0; t < kNumStateTensors; ++t) {
    tensors[StateTensorName(static_cast<StateTensor>(t))] = "f32";
  }
  j["tensors"] = tensors;
  json params = json::array();
  for (const CheckpointParam& p : h.params) {
    params.push_back({{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}});
  }
  j["params"] = params;
  return j;
}

json FileJson(const CheckpointFileInfo& f) {
  json chunks = json::array();
  for (const CheckpointChunk& c : f.chunks) {
    json one = json::array({c.param, StateTensorName(c.tensor), c.begin, c.end, c.offset});
    if (c.runs > 1) {
      one.push_back(c.stride);
      one.push_back(c.runs);
    }
    chunks.push_back(std::move(one));
  }
  return {{"name", f.name},       {"rank", f.rank},
          {"bytes", f.bytes},     {"crc32c", f.crc32c},
          {"block_crc32c", f.block_crc32c}, {"chunks", chunks}};
}

// An object one key per line, an array of objects one element per line,
// everything else compact: readable, and a file's chunks stay on its line.
std::string Lines(const json& j) {
  std::string out = "{\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    absl::StrAppend(&out, first ? "" : ",\n", " ", json(it.key()).dump(), ": ");
    first = false;
    const json& v = *it;
    if (v.is_array() && !v.empty() && v.front().is_object()) {
      out += "[\n";
      for (size_t i = 0; i < v.size(); ++i) {
        absl::StrAppend(&out, "  ", v[i].dump(), i + 1 < v.size() ? ",\n" : "\n");
      }
      out += " ]";
    } else {
      out += v.dump();
    }
  }
  return out + "\n}\n";
}

// Field readers: InvalidArgument "<what>: field <key> ...".
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}
  StatusOr<const json*> Field(const json& obj, const char* key, json::value_t type) const {
    if (!obj.is_object()) return Bad(absl::StrCat("expected an object holding \"", key, "\""));
    auto it = obj.find(key);
    if (it == obj.end()) return Bad(absl::StrCat("field \"", key, "\" is missing"));
    const bool ok = type == json::value_t::number_integer
                        ? it->is_number_integer()
                        : it->type() == type;
    if (!ok) return Bad(absl::StrCat("field \"", key, "\" has the wrong type: ", JsonBrief(*it)));
    return &*it;
  }
  StatusOr<int64_t> Int(const json& obj, const char* key, int64_t lo, int64_t hi) const {
    BATON_ASSIGN_OR_RETURN(const json* v, Field(obj, key, json::value_t::number_integer));
    return JsonInt(*v, absl::StrCat(what_, ": field \"", key, "\""), lo, hi);
  }
  StatusOr<std::string> Str(const json& obj, const char* key) const {
    BATON_ASSIGN_OR_RETURN(const json* v, Field(obj, key, json::value_t::string));
    return v->get<std::string>();
  }
  Status Bad(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": ", msg));
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
};

StatusOr<StateTensor> ParseTensor(const Reader& r, const json& v) {
  if (v.is_string()) {
    for (int t = 0; t < kNumStateTensors; ++t) {
      if (v.get<std::string>() == StateTensorName(static_cast<StateTensor>(t))) {
        return static_cast<StateTensor>(t);
      }
    }
  }
  return r.Bad(absl::StrCat("unknown state tensor ", JsonBrief(v),
                            " (this reader knows master, moment1, moment2)"));
}

StatusOr<CheckpointHeader> ParseHeader(const Reader& r, const json& j) {
  CheckpointHeader h;
  BATON_ASSIGN_OR_RETURN(h.step, r.Int(j, "step", 0, kMaxElems));
  BATON_ASSIGN_OR_RETURN(h.data_position, r.Int(j, "data_position", INT64_MIN, INT64_MAX));
  BATON_ASSIGN_OR_RETURN(h.model, r.Str(j, "model"));
  BATON_ASSIGN_OR_RETURN(h.policy_name, r.Str(j, "policy_name"));
  BATON_ASSIGN_OR_RETURN(const json* policy, r.Field(j, "policy", json::value_t::object));
  h.policy_json = policy->dump();
  BATON_ASSIGN_OR_RETURN(const json* mesh, r.Field(j, "mesh", json::value_t::object));
  for (MeshDim d : DefaultMeshOrder()) {
    BATON_ASSIGN_OR_RETURN(const int64_t s, r.Int(*mesh, MeshDimName(d), 1, kMaxWorldSize));
    h.mesh[d] = static_cast<int>(s);
  }
  BATON_ASSIGN_OR_RETURN(const int64_t world, r.Int(j, "world_size", 1, kMaxWorldSize));
  h.world_size = static_cast<int>(world);
  BATON_ASSIGN_OR_RETURN(h.param_dtype, r.Str(j, "param_dtype"));
  BATON_ASSIGN_OR_RETURN(const std::string nonce, r.Str(j, "nonce"));
  if (nonce.size() != 16 || !absl::SimpleHexAtoi(nonce, &h.nonce)) {
    return r.Bad(absl::StrCat("field \"nonce\" must be 16 hex digits, got \"", nonce, "\""));
  }
  BATON_ASSIGN_OR_RETURN(h.block_bytes, r.Int(j, "block_bytes", 4096, int64_t{1} << 30));
  BATON_ASSIGN_OR_RETURN(const json* tensors, r.Field(j, "tensors", json::value_t::object));
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    BATON_RETURN_IF_ERROR(ParseTensor(r, json(it.key())).status());
    if (*it != "f32") return r.Bad(absl::StrCat("tensor ", it.key(), " has dtype ", JsonBrief(*it)));
  }
  BATON_ASSIGN_OR_RETURN(const json* params, r.Field(j, "params", json::value_t::array));
  std::set<std::string> names;
  for (const json& p : *params) {
    CheckpointParam cp;
    BATON_ASSIGN_OR_RETURN(cp.name, r.Str(p, "name"));
    BATON_ASSIGN_OR_RETURN(cp.numel, r.Int(p, "numel", 0, kMaxElems));
    BATON_ASSIGN_OR_RETURN(const json* shape, r.Field(p, "shape", json::value_t::array));
    int64_t product = 1;
    for (const json& d : *shape) {
      BATON_ASSIGN_OR_RETURN(const int64_t n, JsonInt(d, absl::StrCat(r.what(), ": a dimension of ",
                                                                     cp.name), 0, kMaxElems));
      cp.shape.push_back(n);
      product = (n == 0 || product == 0) ? 0
                : product > kMaxElems / n  ? kMaxElems + 1
                                           : product * n;
    }
    if (product != cp.numel) {
      return r.Bad(absl::StrCat("parameter ", cp.name, " has numel ", cp.numel,
                                " but its shape holds ", product));
    }
    if (!names.insert(cp.name).second) return r.Bad(absl::StrCat("parameter ", cp.name, " twice"));
    h.params.push_back(std::move(cp));
  }
  return h;
}

StatusOr<CheckpointFileInfo> ParseFile(const Reader& r, const json& j, const CheckpointHeader& h,
                                       int64_t version) {
  CheckpointFileInfo f;
  BATON_ASSIGN_OR_RETURN(f.name, r.Str(j, "name"));
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.') {
    return r.Bad(absl::StrCat("file name \"", f.name, "\" is not a plain name"));
  }
  BATON_ASSIGN_OR_RETURN(const int64_t rank, r.Int(j, "rank", 0, h.world_size - 1));
  f.rank = static_cast<int>(rank);
  BATON_ASSIGN_OR_RETURN(f.bytes, r.Int(j, "bytes", 0, kMaxBytes));
  BATON_ASSIGN_OR_RETURN(const int64_t crc, r.Int(j, "crc32c", 0, UINT32_MAX));
  f.crc32c = static_cast<uint32_t>(crc);
  BATON_ASSIGN_OR_RETURN(const json* blocks, r.Field(j, "block_crc32c", json::value_t::array));
  for (const json& b : *blocks) {
    BATON_ASSIGN_OR_RETURN(const int64_t v, JsonInt(b, absl::StrCat(r.what(), ": a block CRC of ",
                                                                   f.name), 0, UINT32_MAX));
    f.block_crc32c.push_back(static_cast<uint32_t>(v));
  }
  const int64_t nblocks = (f.bytes + h.block_bytes - 1) / h.block_bytes;
  if (static_cast<int64_t>(f.block_crc32c.size()) != nblocks) {
    return r.Bad(absl::StrCat("file ", f.name, " of ", f.bytes, " bytes has ",
                              f.block_crc32c.size(), " block CRCs, expected ", nblocks));
  }
  BATON_ASSIGN_OR_RETURN(const json* chunks, r.Field(j, "chunks", json::value_t::array));
  for (const json& c : *chunks) {
    if (!c.is_array() || (c.size() != 5 && (c.size() != 7 || version < kCheckpointStridedVersion))) {
      return r.Bad(absl::StrCat("a chunk of ", f.name, " is not [param, tensor, begin, end, offset]",
                                version >= kCheckpointStridedVersion
                                    ? " or [param, tensor, begin, end, offset, stride, runs]"
                                    : ""));
    }
    CheckpointChunk ch;
    const std::string at = absl::StrCat(r.what(), ": a chunk of ", f.name);
    BATON_ASSIGN_OR_RETURN(const int64_t p, JsonInt(c[0], at, 0, int64_t(h.params.size()) - 1));
    ch.param = static_cast<int>(p);
    BATON_ASSIGN_OR_RETURN(ch.tensor, ParseTensor(r, c[1]));
    const int64_t numel = h.params[ch.param].numel;
    BATON_ASSIGN_OR_RETURN(ch.begin, JsonInt(c[2], at, 0, numel));
    BATON_ASSIGN_OR_RETURN(ch.end, JsonInt(c[3], at, ch.begin, numel));
    BATON_ASSIGN_OR_RETURN(ch.offset, JsonInt(c[4], at, 0, f.bytes));
    if (c.size() == 7) {
      BATON_ASSIGN_OR_RETURN(ch.stride, JsonInt(c[5], at, ch.end - ch.begin, numel));
      BATON_ASSIGN_OR_RETURN(ch.runs, JsonInt(c[6], at, 2, numel));
      if (ch.run_begin(ch.runs - 1) + (ch.end - ch.begin) > numel) {
        return r.Bad(absl::StrCat("a strided chunk of ", f.name, " ends at element ",
                                  ch.run_begin(ch.runs - 1) + (ch.end - ch.begin),
                                  ", past parameter ", h.params[ch.param].name, "'s ", numel));
      }
    }
    if (ch.offset + ch.bytes() > f.bytes) {
      return r.Bad(absl::StrCat("a chunk of ", f.name, " ends at byte ", ch.offset + ch.bytes(),
                                ", past the file's ", f.bytes));
    }
    f.chunks.push_back(ch);
  }
  return f;
}

// The version a manifest (or part) of these files is written with.
int VersionOf(const std::vector<CheckpointFileInfo>& files) {
  for (const CheckpointFileInfo& f : files) {
    for (const CheckpointChunk& c : f.chunks) {
      if (c.runs > 1) return kCheckpointStridedVersion;
    }
  }
  return kCheckpointVersion;
}

// The "version" field: 1, or 2 (strided chunks).
StatusOr<int64_t> ReadVersion(const Reader& r, const json& j) {
  BATON_ASSIGN_OR_RETURN(const int64_t version, r.Int(j, "version", 0, INT32_MAX));
  if (version != kCheckpointVersion && version != kCheckpointStridedVersion) {
    return r.Bad(absl::StrCat("version ", version, ": this reader knows versions ",
                              kCheckpointVersion, " and ", kCheckpointStridedVersion));
  }
  return version;
}

// Every (parameter, tensor) is tiled exactly once by the chunks.
Status CheckCoverage(const Reader& r, const Manifest& m) {
  const auto& params = m.header.params;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> runs(params.size() * kNumStateTensors);
  for (const CheckpointFileInfo& f : m.files) {
    for (const CheckpointChunk& c : f.chunks) {
      if (c.end <= c.begin) continue;
      for (int64_t k = 0; k < c.runs; ++k) {
        runs[c.param * kNumStateTensors + static_cast<int>(c.tensor)].push_back(
            {c.run_begin(k), c.run_begin(k) + (c.end - c.begin)});
      }
    }
  }
  for (size_t p = 0; p < params.size(); ++p) {
    for (int t = 0; t < kNumStateTensors; ++t) {
      auto& v = runs[p * kNumStateTensors + t];
      std::sort(v.begin(), v.end());
      int64_t at = 0;
      for (const auto& [b, e] : v) {
        if (b != at) {
          return r.Bad(absl::StrCat("parameter ", params[p].name, " tensor ",
                                    StateTensorName(static_cast<StateTensor>(t)),
                                    b > at ? ": no file holds elements [" : ": two files hold elements [",
                                    std::min(at, b), ", ", std::max(at, b), ")"));
        }
        at = e;
      }
      if (at != params[p].numel) {
        return r.Bad(absl::StrCat("parameter ", params[p].name, " tensor ",
                                  StateTensorName(static_cast<StateTensor>(t)),
                                  ": no file holds elements [", at, ", ", params[p].numel, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* StateTensorName(StateTensor t) {
  switch (t) {
    case StateTensor::kMaster: return "master";
    case StateTensor::kMoment1: return "moment1";
    case StateTensor::kMoment2: return "moment2";
  }
  return "?";
}

std::vector<CheckpointParam> CheckpointParams(const ModelLayout& layout) {
  std::vector<CheckpointParam> out;
  std::set<std::string> seen;
  for (const auto& refs : layout.unit_params) {
    for (const ParamRef& ref : refs) {
      const ParamSlot& s = layout.buckets[ref.bucket].params[ref.slot];
      if (seen.insert(s.name).second) out.push_back({s.name, s.shape, s.numel});
    }
  }
  return out;
}

std::string StepDirName(int64_t step) {
  return absl::StrFormat("step-%08d", static_cast<long long>(step));
}

int64_t StepOfDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step-") || name.size() < 8 || name.size() > 18) return -1;
  int64_t step = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string RankFileStem(int rank, uint64_t nonce) {
  return absl::StrFormat("rank-%05d-%016x", rank, nonce);
}

std::string ManifestToJson(const Manifest& m) {
  json j = HeaderJson(m.header);
  j["format"] = "baton-checkpoint";
  j["version"] = VersionOf(m.files);
  json files = json::array();
  for (const CheckpointFileInfo& f : m.files) files.push_back(FileJson(f));
  j["files"] = files;
  const std::string body = j.dump();
  j["manifest_crc32c"] = Crc32c(body.data(), body.size());
  return Lines(j);
}

StatusOr<Manifest> ManifestFromJson(absl::string_view text, absl::string_view what) {
  const Reader r{std::string(what)};
  BATON_ASSIGN_OR_RETURN(json j, ParseJsonInput(text, what));
  BATON_ASSIGN_OR_RETURN(const std::string format, r.Str(j, "format"));
  if (format != "baton-checkpoint") return r.Bad(absl::StrCat("format is \"", format, "\""));
  BATON_ASSIGN_OR_RETURN(const int64_t version, ReadVersion(r, j));
  BATON_ASSIGN_OR_RETURN(const int64_t crc, r.Int(j, "manifest_crc32c", 0, UINT32_MAX));
  j.erase("manifest_crc32c");
  const std::string body = j.dump();
  if (Crc32c(body.data(), body.size()) != static_cast<uint32_t>(crc)) {
    return absl::DataLossError(absl::StrCat(what, ": checksum mismatch (the manifest was "
                                                  "modified or damaged)"));
  }
  Manifest m;
  BATON_ASSIGN_OR_RETURN(m.header, ParseHeader(r, j));
  BATON_ASSIGN_OR_RETURN(const json* files, r.Field(j, "files", json::value_t::array));
  std::set<std::string> names;
  for (const json& f : *files) {
    BATON_ASSIGN_OR_RETURN(CheckpointFileInfo info, ParseFile(r, f, m.header, version));
    if (!names.insert(info.name).second) return r.Bad(absl::StrCat("file ", info.name, " twice"));
    m.files.push_back(std::move(info));
  }
  BATON_RETURN_IF_ERROR(CheckCoverage(r, m));
  return m;
}

std::string PartToJson(const CheckpointHeader& h, const CheckpointFileInfo& f) {
  json j;
  j["format"] = "baton-checkpoint-part";
  j["version"] = VersionOf({f});
  j["header"] = HeaderJson(h);
  j["file"] = FileJson(f);
  return j.dump() + "\n";
}

StatusOr<ManifestPart> PartFromJson(absl::string_view text, absl::string_view what) {
  const Reader r{std::string(what)};
  BATON_ASSIGN_OR_RETURN(json j, ParseJsonInput(text, what));
  BATON_ASSIGN_OR_RETURN(const std::string format, r.Str(j, "format"));
  if (format != "baton-checkpoint-part") return r.Bad(absl::StrCat("format is \"", format, "\""));
  BATON_ASSIGN_OR_RETURN(const int64_t version, ReadVersion(r, j));
  ManifestPart part;
  BATON_ASSIGN_OR_RETURN(const json* header, r.Field(j, "header", json::value_t::object));
  BATON_ASSIGN_OR_RETURN(part.header, ParseHeader(r, *header));
  BATON_ASSIGN_OR_RETURN(const json* file, r.Field(j, "file", json::value_t::object));
  BATON_ASSIGN_OR_RETURN(part.file, ParseFile(r, *file, part.header, version));
  return part;
}

StatusOr<std::string> FindCheckpoint(CheckpointFs& fs, const std::string& path) {
  if (!fs.IsDir(path)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, ": no such directory"));
  }
  BATON_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.List(path));
  if (std::find(names.begin(), names.end(), kManifestName) != names.end()) return path;
  int64_t best = -1;
  std::vector<std::string> partial;
  for (const std::string& n : names) {
    const int64_t step = StepOfDirName(n);
    const std::string dir = JoinPath(path, n);
    if (step < 0 || !fs.IsDir(dir)) continue;
    auto inside = fs.List(dir);
    if (inside.ok() &&
        std::find(inside->begin(), inside->end(), kManifestName) != inside->end()) {
      best = std::max(best, step);
    } else {
      partial.push_back(n);
    }
  }
  if (best >= 0) return JoinPath(path, StepDirName(best));
  std::string msg = absl::StrCat("no complete checkpoint in ", path,
                                 " (neither a manifest.json nor a step-N directory holding one)");
  if (!partial.empty()) {
    absl::StrAppend(&msg, "; ", partial.size(), " partial save(s) without a manifest ignored: ",
                    partial.front(), partial.size() > 1 ? ", ..." : "");
  }
  return absl::NotFoundError(msg);
}

StatusOr<Manifest> ReadManifest(CheckpointFs& fs, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  BATON_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(fs, path, kMaxJsonInputBytes));
  return ManifestFromJson(text, path);
}

}  // namespace baton::scheduler
