// checkpoint: look at a baton checkpoint (scheduler/checkpoint.h,
// docs/checkpoints.md) without training.
//
//   checkpoint list DIR [--json]
//       the manifest: step, data position, model, policy, mesh, the files
//       (rank, bytes, chunks) and the parameters (name, shape).
//   checkpoint verify DIR
//       reads every file whole: its size and the CRC-32C of each block and
//       of the file. One line per file; exit 1 when any is damaged or
//       missing (the message names it).
//   checkpoint compare DIR_A DIR_B [--tolerance=R]
//       every state tensor (master, moment1, moment2) of every parameter,
//       matched by name, whatever layouts saved them: the largest relative
//       difference ||a - b|| / ||b|| over the parameters, per tensor, and
//       the largest element difference. Exit 0 when every tensor is
//       identical bit for bit (or, with --tolerance, within R relative),
//       1 otherwise.
// DIR is a checkpoint directory (ROOT/step-N) or a root, whose newest
// complete checkpoint is taken. Bad usage: one line on stderr, exit 2;
// an unreadable or invalid checkpoint: one line on stderr, exit 1.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/cli/flags.h"
#include "baton/runtime/output_file.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/checkpoint_io.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using scheduler::Manifest;

constexpr char kUsage[] =
    "usage: checkpoint list DIR [--json]\n"
    "       checkpoint verify DIR\n"
    "       checkpoint compare DIR_A DIR_B [--tolerance=R]\n"
    "DIR: a checkpoint directory (ROOT/step-N) or a root (its newest complete one).\n";

[[noreturn]] void Usage(const std::string& message) { cli::FailUsage("checkpoint", message); }

[[noreturn]] void Die(const Status& st) {
  std::fprintf(stderr, "checkpoint: %s\n", std::string(st.message()).c_str());
  std::exit(1);
}

struct Opened {
  std::string dir;
  Manifest manifest;
};

Opened Open(const std::string& path) {
  auto dir = scheduler::FindCheckpoint(scheduler::PosixFs(), path);
  if (!dir.ok()) Die(dir.status());
  auto m = scheduler::ReadManifest(scheduler::PosixFs(), *dir);
  if (!m.ok()) Die(m.status());
  return {*dir, *std::move(m)};
}

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

std::string MeshText(const scheduler::MeshSizes& mesh) {
  std::string out;
  for (scheduler::MeshDim d : scheduler::DefaultMeshOrder()) {
    absl::StrAppend(&out, out.empty() ? "" : " ", scheduler::MeshDimName(d), "=", mesh[d]);
  }
  return out;
}

int List(const std::string& path, bool json) {
  const Opened c = Open(path);
  const scheduler::CheckpointHeader& h = c.manifest.header;
  int64_t bytes = 0;
  for (const auto& f : c.manifest.files) bytes += f.bytes;
  if (json) {
    nlohmann::json j;
    j["dir"] = c.dir;
    j["step"] = h.step;
    j["data_position"] = h.data_position;
    j["model"] = h.model;
    j["policy"] = h.policy_name;
    j["world_size"] = h.world_size;
    j["mesh"] = MeshText(h.mesh);
    j["param_dtype"] = h.param_dtype;
    j["bytes"] = bytes;
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : c.manifest.files) {
      files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes},
                       {"chunks", f.chunks.size()}});
    }
    j["files"] = files;
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : h.params) params.push_back({{"name", p.name}, {"shape", p.shape}});
    j["params"] = params;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("checkpoint %s\n", c.dir.c_str());
  std::printf("step %lld, data position %lld, model %s, policy %s\n",
              static_cast<long long>(h.step), static_cast<long long>(h.data_position),
              h.model.c_str(), h.policy_name.c_str());
  std::printf("saved by %d ranks, mesh %s, parameters in %s; state: master, moment1, moment2 "
              "(f32)\n", h.world_size, MeshText(h.mesh).c_str(), h.param_dtype.c_str());
  std::printf("%zu files, %.2f MiB:\n", c.manifest.files.size(), bytes / 1048576.0);
  for (const auto& f : c.manifest.files) {
    std::printf("  %s  rank %d  %lld bytes  %zu chunks\n", f.name.c_str(), f.rank,
                static_cast<long long>(f.bytes), f.chunks.size());
  }
  std::printf("%zu parameters:\n", h.params.size());
  for (const auto& p : h.params) std::printf("  %s %s\n", p.name.c_str(), Shape(p.shape).c_str());
  return 0;
}

int Verify(const std::string& path) {
  const Opened c = Open(path);
  int bad = 0;
  int64_t bytes = 0;
  for (size_t f = 0; f < c.manifest.files.size(); ++f) {
    const Status st = scheduler::VerifyFile(scheduler::PosixFs(), c.dir, c.manifest,
                                            static_cast<int>(f));
    if (st.ok()) {
      bytes += c.manifest.files[f].bytes;
      std::printf("ok       %s\n", c.manifest.files[f].name.c_str());
    } else {
      ++bad;
      std::printf("DAMAGED  %s\n", c.manifest.files[f].name.c_str());
      std::fprintf(stderr, "checkpoint: %s\n", std::string(st.message()).c_str());
    }
  }
  if (bad > 0) {
    std::printf("%d of %zu files damaged in %s\n", bad, c.manifest.files.size(), c.dir.c_str());
    return 1;
  }
  std::printf("verified %zu files, %lld bytes, in %s\n", c.manifest.files.size(),
              static_cast<long long>(bytes), c.dir.c_str());
  return 0;
}

int Compare(const std::string& path_a, const std::string& path_b, double tolerance) {
  const Opened a = Open(path_a), b = Open(path_b);
  const auto& pa = a.manifest.header.params;
  const auto& pb = b.manifest.header.params;
  if (a.manifest.header.step != b.manifest.header.step) {
    std::printf("note: steps differ (%lld and %lld)\n",
                static_cast<long long>(a.manifest.header.step),
                static_cast<long long>(b.manifest.header.step));
  }
  bool identical = true;
  double worst = 0;
  for (int t = 0; t < scheduler::kNumStateTensors; ++t) {
    const auto tensor = static_cast<scheduler::StateTensor>(t);
    double max_rel = 0, max_elem = 0;
    std::string at;
    for (size_t i = 0; i < pa.size(); ++i) {
      size_t j = 0;
      while (j < pb.size() && pb[j].name != pa[i].name) ++j;
      if (j == pb.size() || pb[j].shape != pa[i].shape) {
        std::fprintf(stderr, "checkpoint: parameter %s %s in %s\n", pa[i].name.c_str(),
                     j == pb.size() ? "is missing" : "has another shape", b.dir.c_str());
        return 1;
      }
      auto x = scheduler::ReadTensor(scheduler::PosixFs(), a.dir, a.manifest, static_cast<int>(i),
                                     tensor);
      if (!x.ok()) Die(x.status());
      auto y = scheduler::ReadTensor(scheduler::PosixFs(), b.dir, b.manifest, static_cast<int>(j),
                                     tensor);
      if (!y.ok()) Die(y.status());
      if (std::memcmp(x->data(), y->data(), x->size() * sizeof(float)) == 0) continue;
      identical = false;
      double diff = 0, norm = 0;
      for (size_t k = 0; k < x->size(); ++k) {
        const double d = static_cast<double>((*x)[k]) - (*y)[k];
        diff += d * d;
        norm += static_cast<double>((*y)[k]) * (*y)[k];
        max_elem = std::max(max_elem, std::abs(d));
      }
      const double rel = norm > 0 ? std::sqrt(diff / norm) : INFINITY;
      if (rel > max_rel) {
        max_rel = rel;
        at = pa[i].name;
      }
    }
    worst = std::max(worst, max_rel);
    std::printf("%-8s largest relative difference %.3g%s%s, largest element difference %.3g\n",
                scheduler::StateTensorName(tensor), max_rel, at.empty() ? "" : " in ", at.c_str(),
                max_elem);
  }
  if (identical) {
    std::printf("identical: every tensor of %zu parameters agrees bit for bit\n", pa.size());
    return 0;
  }
  if (tolerance > 0 && worst <= tolerance) {
    std::printf("within tolerance %.3g (largest relative difference %.3g)\n", tolerance, worst);
    return 0;
  }
  std::printf("differ (largest relative difference %.3g)\n", worst);
  return 1;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args;
  cli::FlagReader flags("checkpoint");
  bool json = false;
  double tolerance = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    cli::VersionFlag("checkpoint", a);
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--json") {
      flags.Switch(a);
      json = true;
    } else if (a.rfind("--", 0) == 0) {
      const auto [key, v] = flags.Split(a);
      if (key != "--tolerance") Usage(absl::StrCat("unknown flag ", key, " (see --help)"));
      tolerance = cli::NumberFlag("checkpoint", key, v, 0, 1);
    } else {
      args.push_back(a);
    }
  }
  if (args.empty()) Usage("name a command: list, verify or compare (see --help)");
  const std::string& cmd = args[0];
  const size_t want = cmd == "compare" ? 3 : 2;
  if (cmd != "list" && cmd != "verify" && cmd != "compare") {
    Usage(absl::StrCat("unknown command \"", cmd, "\" (list, verify or compare)"));
  }
  if (args.size() != want) {
    Usage(absl::StrCat(cmd, " takes ", want - 1, want == 3 ? " checkpoints" : " checkpoint",
                       ", got ", args.size() - 1));
  }
  if (json && cmd != "list") Usage("--json goes with list");
  if (tolerance > 0 && cmd != "compare") Usage("--tolerance goes with compare");
  if (cmd == "list") return List(args[1], json);
  if (cmd == "verify") return Verify(args[1]);
  return Compare(args[1], args[2], tolerance);
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("checkpoint");
  return baton::Main(argc, argv);
}
