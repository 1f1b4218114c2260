// Collective benchmark with nccl-tests conventions (flags, columns,
// formulas, #wrong, footer, exit code), on any baton backend.
//
//   ./bazelw run //bench:collectives -- --collective=all_gather
//       --backend=inproc|ucx|nccl --nranks=N [nccl-tests flags]
//   (one command line)
//
// inproc ranks are threads of this process; ucx and nccl ranks are
// processes started through the launcher (this binary re-runs itself with
// RANK/WORLD_SIZE/... set). Only rank 0 prints. Two footer lines follow
// nccl-tests' own: the limit of the medium measured in the same run at the
// largest size, and the best busbw at that size over it.
//
// --collective=sendrecv is nccl-tests' sendrecv_perf: each rank sends
// `count` to the next rank and receives as many from the previous one in
// one SendRecvGroup; size = count x type size, busbw = algbw. There is no
// in-place form (a rank's buffer would be read by the next rank while the
// previous one writes it): its columns print N/A.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/testing/collective_check.h"
#include "baton/comm/factory.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/bootstrap/store.h"
#include "nlohmann/json.hpp"
#include "baton/runtime/device.h"
#include "baton/runtime/output_file.h"
#include "baton/runtime/version.h"
#include "baton/scheduler/limits.h"

namespace baton {
namespace {

struct Options {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::string backend = "inproc";
  std::string device;  // host | cuda; default by backend
  int nranks = 1;
  size_t min_bytes = 32 << 20;
  size_t max_bytes = 32 << 20;
  size_t step_bytes = 1 << 20;
  double step_factor = 1;  // 1: use step_bytes
  int iters = 20;
  int warmup = 1;
  int agg = 1;
  int check = 1;
  ReduceOp op = ReduceOp::kSum;
  DataType type = DataType::kF32;
  int blocking = 0;
  int timeout_s = 300;
  int cudagraph = 0;
  std::string json_path;
  int average = 1;
  int root = 0;
  // inproc on host streams: the device-memory protocol
  // (CommConfig::inproc_event_protocol), to time it without a GPU.
  int inproc_events = 0;
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "collectives: %s\n"
               "usage: collectives --collective=all_gather|reduce_scatter|"
               "all_reduce|broadcast|sendrecv --backend=inproc|ucx|nccl --nranks=N\n"
               "  [--device=host|cuda] [-b MIN] [-e MAX] [-i STEP] [-f FACTOR]"
               " [-n ITERS] [-w WARMUP] [-m AGG]\n"
               "  [-c CHECK] [-o sum|avg] [-d float|half|bfloat16|int32] "
               "[-z 0|1] [-T SECONDS] [-G 0] [-J FILE] [-a 0|1|2|3] [-r ROOT]\n"
               "  [--inproc_events=0|1]\n"
               "Sizes take K/M/G suffixes (binary), up to 64G; -f is in [1, 1024];\n"
               "a flag may be given once.\n",
               why.c_str());
  return 2;
}

// The largest -b / -e / -i: past it a buffer cannot be allocated on any
// one device we run on, and the arithmetic stays far from overflow.
constexpr size_t kMaxBytes = size_t{64} << 30;
constexpr double kMaxStepFactor = 1024;

// "8M" -> 8 << 20. False for anything that is not a number with an
// optional K/M/G suffix or that exceeds kMaxBytes (checked before the
// multiply, so 17179869184G is refused, not wrapped to 0).
bool ParseSize(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  uint64_t mult = 1;
  std::string num = s;
  const char last = s.back();
  if (last == 'K' || last == 'k') mult = uint64_t{1} << 10;
  if (last == 'M' || last == 'm') mult = uint64_t{1} << 20;
  if (last == 'G' || last == 'g') mult = uint64_t{1} << 30;
  if (mult != 1) num.pop_back();
  uint64_t v;
  if (!absl::SimpleAtoi(num, &v) || v > kMaxBytes / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

// The long name of a flag given by its one-letter nccl-tests form, so a
// flag given twice under either name is caught.
std::string LongName(const std::string& key) {
  static const std::pair<const char*, const char*> kShort[] = {
      {"b", "minbytes"},     {"e", "maxbytes"},     {"i", "stepbytes"},
      {"f", "stepfactor"},   {"n", "iters"},        {"w", "warmup_iters"},
      {"m", "agg_iters"},    {"c", "check"},        {"o", "op"},
      {"d", "datatype"},     {"z", "blocking"},     {"T", "timeout"},
      {"G", "cudagraph"},    {"J", "output_file"},  {"a", "average"},
      {"r", "root"}};
  for (const auto& [short_name, long_name] : kShort) {
    if (key == short_name) return long_name;
  }
  return key;
}

// Parses argv (both "-b 8M" and "--minbytes=8M" forms). Returns 0 or the
// exit code for bad usage: an unknown flag, a flag given twice (under
// either name), a missing or empty value, or a value out of its range.
int Parse(int argc, char** argv, Options* o) {
  std::set<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--version") {
      std::printf("collectives (baton %s)\n", BATON_VERSION);
      std::exit(0);
    }
    std::string key, val;
    if (absl::StartsWith(a, "--")) {
      const size_t eq = a.find('=');
      key = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        val = a.substr(eq + 1);
      } else if (i + 1 < argc) {
        val = argv[++i];
      }
    } else if (a.size() >= 2 && a[0] == '-') {
      key = a.substr(1, 1);
      if (a.size() > 2) {
        val = a.substr(2);
      } else if (i + 1 < argc) {
        val = argv[++i];
      }
    } else {
      return Usage("unexpected argument '" + a + "'");
    }
    if (val.empty()) return Usage(absl::StrCat("'", a, "' needs a value"));
    if (!seen.insert(LongName(key)).second) {
      return Usage(absl::StrCat("--", LongName(key), " is given more than once"));
    }
    auto int_flag = [&](int* dst, int lo, int hi) {
      int v;
      if (!absl::SimpleAtoi(val, &v) || v < lo || v > hi) {
        return Usage(absl::StrCat("--", LongName(key), " needs an integer in [", lo,
                                  ", ", hi, "], got '", val, "'"));
      }
      *dst = v;
      return 0;
    };
    auto size_flag = [&](size_t* dst) {
      if (!ParseSize(val, dst)) {
        return Usage(absl::StrCat("--", LongName(key), " needs a size up to ",
                                  kMaxBytes >> 30, "G, got '", val, "'"));
      }
      return 0;
    };
    int rc = 0;
    if (key == "collective" && val == "sendrecv") {
      o->kind = CollectiveKind::kSend;  // the ring exchange (collective_check.h)
    } else if (key == "collective") {
      auto k = ParseCollective(val);
      if (!k.ok() || *k == CollectiveKind::kBarrier) {
        return Usage("bad --collective '" + val + "'");
      }
      o->kind = *k;
    } else if (key == "backend") {
      o->backend = val;
      if (val != "inproc" && val != "ucx" && val != "nccl") {
        return Usage("bad --backend '" + val + "' (inproc, ucx, nccl)");
      }
    } else if (key == "device") {
      o->device = val;
      if (val != "host" && val != "cuda") {
        return Usage("bad --device '" + val + "' (host, cuda)");
      }
    } else if (key == "nranks") {
      rc = int_flag(&o->nranks, 1, static_cast<int>(scheduler::kMaxLocalRanks));
    } else if (key == "b" || key == "minbytes") {
      rc = size_flag(&o->min_bytes);
    } else if (key == "e" || key == "maxbytes") {
      rc = size_flag(&o->max_bytes);
    } else if (key == "i" || key == "stepbytes") {
      rc = size_flag(&o->step_bytes);
    } else if (key == "f" || key == "stepfactor") {
      // Written so that nan fails too.
      if (!absl::SimpleAtod(val, &o->step_factor) ||
          !(o->step_factor >= 1 && o->step_factor <= kMaxStepFactor)) {
        return Usage(absl::StrCat("--stepfactor needs a number in [1, ", kMaxStepFactor,
                                  "], got '", val, "'"));
      }
    } else if (key == "n" || key == "iters") {
      rc = int_flag(&o->iters, 1, 1 << 24);
    } else if (key == "w" || key == "warmup_iters") {
      rc = int_flag(&o->warmup, 0, 1 << 24);
    } else if (key == "m" || key == "agg_iters") {
      rc = int_flag(&o->agg, 1, 1 << 20);
    } else if (key == "c" || key == "check") {
      rc = int_flag(&o->check, 0, 1 << 20);
    } else if (key == "o" || key == "op") {
      auto op = ParseReduceOp(val);
      if (!op.ok()) return Usage(std::string(op.status().message()));
      o->op = *op;
    } else if (key == "d" || key == "datatype") {
      auto t = ParseDataType(val);
      if (!t.ok()) return Usage(std::string(t.status().message()));
      o->type = *t;
    } else if (key == "z" || key == "blocking") {
      rc = int_flag(&o->blocking, 0, 1);
    } else if (key == "T" || key == "timeout") {
      rc = int_flag(&o->timeout_s, 1, 86400);
    } else if (key == "G" || key == "cudagraph") {
      rc = int_flag(&o->cudagraph, 0, 1 << 20);
    } else if (key == "J" || key == "output_file") {
      o->json_path = val;
    } else if (key == "a" || key == "average") {
      rc = int_flag(&o->average, 0, 3);
    } else if (key == "r" || key == "root") {
      rc = int_flag(&o->root, 0, 1 << 20);
    } else if (key == "inproc_events") {
      rc = int_flag(&o->inproc_events, 0, 1);
    } else {
      return Usage("unknown flag '" + a + "'");
    }
    if (rc != 0) return rc;
  }
  if (o->min_bytes > o->max_bytes) return Usage("-b is larger than -e");
  if (o->step_factor == 1 && o->step_bytes == 0) return Usage("-i 0");
  if (o->root >= o->nranks) return Usage("--root must be < --nranks");
  if (o->kind == CollectiveKind::kSend && o->nranks < 2) {
    return Usage("--collective=sendrecv needs --nranks >= 2 (no self-sends)");
  }
  if (o->cudagraph > 0) {
    return Usage("-G (CUDA graph capture) is not supported by this bench");
  }
  if (o->device.empty()) o->device = o->backend == "nccl" ? "cuda" : "host";
  if (o->inproc_events && o->backend != "inproc") {
    return Usage("--inproc_events needs --backend=inproc");
  }
  // Ranks this process starts itself (threads, or processes launched here
  // when no launcher set RANK) are bounded by the host (scheduler/limits.h).
  if (o->backend == "inproc" || std::getenv("RANK") == nullptr) {
    if (Status s = scheduler::CheckLocalRanks(o->nranks, "--nranks"); !s.ok()) {
      return Usage(std::string(s.message()));
    }
  }
  return 0;
}

double BusFactor(CollectiveKind k, int n) {
  switch (k) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return static_cast<double>(n - 1) / n;
    case CollectiveKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    default:
      return 1;
  }
}

// Ranks that share one device share its memory: every byte a collective
// reads or writes goes through that one memory, so busbw is bounded by
//   copy rate x 2 x BusFactor / T,
// where T is the bytes read + written through the memory per byte of
// `size` (a copy of S bytes is 2 S of traffic, and the copy rate counts it
// as S): all-gather 2n out of place (each of n ranks reads and writes the
// whole buffer: n-1 peers' chunks plus its own) and 2(n-1) in place;
// reduce-scatter n+1 (every rank's block of every input is read once, each
// rank writes its 1/n); all-reduce 2n (each input read once, each output
// written once); broadcast 2n out of place, 2(n-1) in place. All-gather
// with 2 ranks out of place: copy rate / 4. 0 for a barrier.
double TrafficFactor(CollectiveKind k, int n, bool in_place) {
  switch (k) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast:
      return in_place ? 2.0 * (n - 1) : 2.0 * n;
    case CollectiveKind::kReduceScatter:
      return n + 1.0;
    case CollectiveKind::kAllReduce:
      return 2.0 * n;
    default:
      return 0;
  }
}

double SharedDeviceLimit(CollectiveKind k, int n, bool in_place,
                         double copy_gbps) {
  const double t = TrafficFactor(k, n, in_place);
  return t > 0 ? copy_gbps * 2.0 * BusFactor(k, n) / t : 0;
}

bool IsSendRecv(const Options& o) { return o.kind == CollectiveKind::kSend; }
const char* BenchName(const Options& o) {
  return IsSendRecv(o) ? "sendrecv" : CollectiveName(o.kind);
}

struct Half {
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = 0;
};
struct Row {
  size_t size = 0, count = 0;
  Half oop, ip;
};

// Everything one rank needs. Only rank 0 prints.
struct RankCtx {
  int rank = 0;
  int n = 1;
  Device* device = nullptr;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Communicator> comm;
};

// The count per rank for a size, nccl-tests style: the per-rank chunk is
// rounded down to a 16-byte multiple.
size_t CountFor(const Options& o, int n, size_t size) {
  const size_t es = DataTypeSize(o.type);
  const bool split = o.kind == CollectiveKind::kAllGather ||
                     o.kind == CollectiveKind::kReduceScatter;
  size_t per_rank_bytes = split ? size / n : size;
  per_rank_bytes -= per_rank_bytes % 16;
  return per_rank_bytes / es;
}

// Device buffers: send and recv regions with room to shift the offsets.
struct Buffers {
  DeviceBuffer mem;
  size_t region = 0;  // bytes per region (send | recv) incl. shifts
  static constexpr int kShifts = 4;
  static constexpr size_t kShift = 1 << 20;
};

Status Run(RankCtx& ctx, const Options& o, std::vector<Row>* rows,
           Communicator::Limit* limit) {
  const int n = ctx.n;
  const size_t es = DataTypeSize(o.type);
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes;;) {
    sizes.push_back(s);
    const size_t next = o.step_factor > 1
                            ? static_cast<size_t>(s * o.step_factor)
                            : s + o.step_bytes;
    if (next > o.max_bytes || next <= s) break;
    s = next;
  }
  const size_t max_count = CountFor(o, n, o.max_bytes);
  const size_t max_send = SendBytes(o.kind, n, max_count, o.type);
  const size_t max_recv = RecvBytes(o.kind, n, max_count, o.type);
  const size_t region =
      std::max(max_send, max_recv) + Buffers::kShifts * Buffers::kShift + 256;
  BATON_ASSIGN_OR_RETURN(DeviceBuffer mem, ctx.device->Allocate(2 * region));
  char* base = static_cast<char*>(mem.data());
  Stream& st = *ctx.stream;
  CollectiveOptions copt;
  copt.timeout = absl::Seconds(o.timeout_s);
  const bool progress = ctx.rank == 0 && ::isatty(2);
  std::vector<float> all(n);
  // Wrong counts are 64-bit: gathered as two i32 words each.
  std::vector<int64_t> all_wrong(n);

  for (size_t si = 0; si < sizes.size(); ++si) {
    const size_t count = CountFor(o, n, sizes[si]);
    Row row;
    row.count = count;
    row.size = (o.kind == CollectiveKind::kAllGather ||
                o.kind == CollectiveKind::kReduceScatter)
                   ? count * es * n
                   : count * es;
    CheckCase cc;
    cc.kind = o.kind;
    cc.type = o.type;
    cc.op = o.op;
    cc.nranks = n;
    cc.count = count;
    cc.root = o.root;
    for (int in_place = 0; in_place < (IsSendRecv(o) ? 1 : 2); ++in_place) {
      auto ptrs = [&](int shift, const void** send, void** recv) {
        PlaceBuffers(cc, ctx.rank, in_place, base + shift * Buffers::kShift,
                     base + region + shift * Buffers::kShift, send, recv);
      };
      const void* send;
      void* recv;
      // Warm-up, then the timed loop over shifting offsets.
      for (int w = 0; w < o.warmup; ++w) {
        ptrs(w % Buffers::kShifts, &send, &recv);
        BATON_RETURN_IF_ERROR(IssueCollective(*ctx.comm, st, cc, send, recv, copt));
      }
      BATON_RETURN_IF_ERROR(st.Synchronize());
      BATON_RETURN_IF_ERROR(ctx.comm->Barrier(st, copt));
      BATON_RETURN_IF_ERROR(st.Synchronize());
      const absl::Time t0 = absl::Now();
      for (int it = 0; it < o.iters; ++it) {
        for (int a = 0; a < o.agg; ++a) {
          ptrs((it * o.agg + a) % Buffers::kShifts, &send, &recv);
          BATON_RETURN_IF_ERROR(
              IssueCollective(*ctx.comm, st, cc, send, recv, copt));
          if (o.blocking) BATON_RETURN_IF_ERROR(st.Synchronize());
        }
      }
      BATON_RETURN_IF_ERROR(st.Synchronize());
      const double us = absl::ToDoubleMicroseconds(absl::Now() - t0) /
                        (static_cast<double>(o.iters) * o.agg);
      // Time over ranks (-a: 0 rank 0, 1 mean, 2 min, 3 max).
      std::vector<float> mine = {static_cast<float>(us)};
      BATON_RETURN_IF_ERROR(ctx.comm->AllGather(
          mine.data(), all.data(), 1, DataType::kF32, st, copt));
      BATON_RETURN_IF_ERROR(st.Synchronize());
      double t = all[0];
      if (o.average == 1) {
        t = 0;
        for (float v : all) t += v;
        t /= n;
      } else if (o.average == 2) {
        t = *std::min_element(all.begin(), all.end());
      } else if (o.average == 3) {
        t = *std::max_element(all.begin(), all.end());
      }
      // Check on the timed buffers (staged through host memory).
      long long wrong = 0;
      if (o.check > 0) {
        int64_t my_wrong = 0;
        for (int c = 0; c < o.check; ++c) {
          cc.seed = c + 1;
          ptrs(0, &send, &recv);
          BATON_ASSIGN_OR_RETURN(
              size_t w, CheckOnBuffers(*ctx.comm, st, cc, send, recv, copt));
          my_wrong += static_cast<int64_t>(w);
        }
        static_assert(sizeof(int64_t) == 2 * sizeof(int32_t));
        BATON_RETURN_IF_ERROR(ctx.comm->AllGather(
            &my_wrong, all_wrong.data(), 2, DataType::kI32, st, copt));
        BATON_RETURN_IF_ERROR(st.Synchronize());
        for (int64_t v : all_wrong) wrong += v;
      }
      const size_t bytes = (o.kind == CollectiveKind::kAllGather ||
                            o.kind == CollectiveKind::kReduceScatter)
                               ? count * es * n
                               : count * es;
      Half h;
      h.time_us = t;
      h.algbw = t > 0 ? bytes / (t * 1e-6) / 1e9 : 0;
      h.busbw = h.algbw * BusFactor(o.kind, n);
      h.wrong = wrong;
      (in_place ? row.ip : row.oop) = h;
    }
    rows->push_back(row);
    if (progress) {
      std::fprintf(stderr, "\r[%zu/%zu] %zu bytes done   ", si + 1,
                   sizes.size(), row.size);
      if (si + 1 == sizes.size()) std::fprintf(stderr, "\n");
    }
  }
  // The limit of the medium at the largest size.
  const size_t probe = std::max<size_t>(
      4096, std::max(RecvBytes(o.kind, n, max_count, o.type),
                     SendBytes(o.kind, n, max_count, o.type)));
  StatusOr<Communicator::Limit> l = ctx.comm->MeasureLimit(probe, 5);
  if (l.ok()) {
    *limit = *l;
  } else if (!absl::IsFailedPrecondition(l.status())) {
    return l.status();
  }
  return Status();
}

const char* RedopName(const Options& o) {
  const bool reduces = o.kind == CollectiveKind::kReduceScatter ||
                       o.kind == CollectiveKind::kAllReduce;
  return reduces ? ReduceOpName(o.op) : "none";
}

// Per-thread bandwidth of `threads` memcpys of `bytes` running at once: what
// the medium gives when every inproc rank copies at the same time (an
// explanation line for the inproc ratio, not a replacement of the limit).
double ConcurrentCopyGbps(size_t bytes, int threads, int iters) {
  std::vector<std::vector<char>> src(threads), dst(threads);
  for (int t = 0; t < threads; ++t) {
    src[t].assign(bytes, 1);
    dst[t].assign(bytes, 0);
  }
  std::vector<std::thread> pool;
  const absl::Time t0 = absl::Now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < iters; ++i) {
        std::memcpy(dst[t].data(), src[t].data(), bytes);
      }
    });
  }
  for (auto& th : pool) th.join();
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  return s > 0 ? static_cast<double>(bytes) * iters / s / 1e9 : 0;
}

// `shared_device`: the n ranks share one device's memory (inproc on a
// GPU); the limit is then SharedDeviceLimit of the measured copy rate.
int Report(const Options& o, int n, const std::vector<Row>& rows,
           const Communicator::Limit& limit, const std::string& devices,
           double concurrent_gbps = 0, bool shared_device = false) {
  std::printf(
      "# Collective: %s  backend: %s%s  device: %s  nranks: %d\n"
      "# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg "
      "iters: %d validation: %d blocking: %d\n#\n# Using devices\n%s#\n",
      BenchName(o), o.backend.c_str(),
      o.inproc_events ? " (event protocol)" : "", o.device.c_str(), n,
      o.min_bytes, o.max_bytes,
      (o.step_factor > 1 ? absl::StrCat(o.step_factor, "(factor)")
                         : absl::StrCat(o.step_bytes, "(bytes)"))
          .c_str(),
      o.warmup, o.iters, o.agg, o.check, o.blocking, devices.c_str());
  std::printf("#%79s%37s\n", "out-of-place", "in-place");
  std::printf("#%11s %13s %9s %7s %7s %10s %8s %8s %6s %10s %8s %8s %6s\n",
              "size", "count", "type", "redop", "root", "time", "algbw",
              "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %13s %9s %7s %7s %10s %8s %8s %6s %10s %8s %8s %6s\n",
              "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
              "(us)", "(GB/s)", "(GB/s)", "");
  long long wrong = 0;
  double bus_sum = 0;
  for (const Row& r : rows) {
    const int root = o.kind == CollectiveKind::kBroadcast ? o.root : -1;
    std::printf(" %11zu %13zu %9s %7s %7d", r.size, r.count,
                DataTypeName(o.type), RedopName(o), root);
    for (const Half* h : {&r.oop, &r.ip}) {
      if (h == &r.ip && IsSendRecv(o)) {
        std::printf(" %10s %8s %8s %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      std::printf(" %10.1f %8.2f %8.2f %6s", h->time_us, h->algbw, h->busbw,
                  o.check ? absl::StrCat(h->wrong).c_str() : "N/A");
      wrong += h->wrong;
      bus_sum += h->busbw;
    }
    std::printf("\n");
  }
  const double halves = IsSendRecv(o) ? 1 : 2;
  const double avg_bus = rows.empty() ? 0 : bus_sum / (halves * rows.size());
  std::printf("# Out of bounds values : %lld %s\n", wrong,
              wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g \n#\n", avg_bus);
  double ratio = 0;
  double shared_oop = 0, shared_ip = 0;
  if (shared_device && limit.gbps > 0) {
    shared_oop = SharedDeviceLimit(o.kind, n, false, limit.gbps);
    shared_ip = SharedDeviceLimit(o.kind, n, true, limit.gbps);
  }
  if (limit.gbps > 0 && !rows.empty() && shared_oop > 0) {
    const Row& last = rows.back();
    ratio = std::max(last.oop.busbw / shared_oop, last.ip.busbw / shared_ip);
    std::printf("# Limit bandwidth : %.2f GB/s out-of-place, %.2f GB/s "
                "in-place (%s %.2f GB/s shared by %d ranks on one device)\n",
                shared_oop, shared_ip, limit.medium.c_str(), limit.gbps, n);
    std::printf("# Shared-device limit : copy rate x 2 x busfactor / T, T = "
                "bytes read+written per byte of size (all_gather, broadcast "
                "2n out-of-place, 2(n-1) in-place; reduce_scatter n+1; "
                "all_reduce 2n)\n");
    std::printf("# Peak busbw / limit : %.3f\n", ratio);
  } else if (limit.gbps > 0 && !rows.empty()) {
    const Row& last = rows.back();
    ratio = std::max(last.oop.busbw, last.ip.busbw) / limit.gbps;
    std::printf("# Limit bandwidth : %.2f GB/s (%s)\n", limit.gbps,
                limit.medium.c_str());
    std::printf("# Peak busbw / limit : %.3f\n", ratio);
    if (concurrent_gbps > 0) {
      std::printf("# Concurrent memcpy : %.2f GB/s per thread, %d threads at "
                  "once (%.2fx the limit)\n",
                  concurrent_gbps, std::min(n, 64), concurrent_gbps / limit.gbps);
    }
  } else {
    std::printf("# Limit bandwidth : n/a (one rank: nothing crosses a link)\n");
    std::printf("# Peak busbw / limit : n/a\n");
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["collective"] = BenchName(o);
    j["backend"] = o.backend;
    j["device"] = o.device;
    j["nranks"] = n;
    j["datatype"] = DataTypeName(o.type);
    j["redop"] = RedopName(o);
    j["iters"] = o.iters;
    j["warmup_iters"] = o.warmup;
    j["agg_iters"] = o.agg;
    for (const Row& r : rows) {
      nlohmann::json row;
      row["size"] = r.size;
      row["count"] = r.count;
      for (auto [name, h] : {std::pair{"out_of_place", &r.oop},
                             std::pair{"in_place", &r.ip}}) {
        if (h == &r.ip && IsSendRecv(o)) continue;  // no in-place form
        row[name] = {{"time_us", h->time_us},
                     {"algbw_gbps", h->algbw},
                     {"busbw_gbps", h->busbw},
                     {"wrong", h->wrong}};
      }
      j["results"].push_back(row);
    }
    j["avg_busbw_gbps"] = avg_bus;
    j["wrong_total"] = wrong;
    if (limit.gbps > 0) {
      j["limit"] = {{"gbps", limit.gbps}, {"medium", limit.medium}};
      if (shared_oop > 0) {
        j["limit"]["shared_device"] = {{"ranks", n},
                                       {"out_of_place_gbps", shared_oop},
                                       {"in_place_gbps", shared_ip}};
      }
      j["peak_busbw_over_limit"] = ratio;
    }
    if (Status s = WriteOutputFile(o.json_path, j.dump(2) + "\n", "the JSON results");
        !s.ok()) {
      std::fprintf(stderr, "collectives: %s\n", std::string(s.message()).c_str());
      return kOutputErrorExitCode;
    }
  }
  return wrong == 0 ? 0 : 1;
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t k = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return k > 0 ? std::string(buf, k) : std::string();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "collectives: %s\n", s.ToString().c_str());
  return 3;
}

StatusOr<std::unique_ptr<Device>> MakeDevice(const Options& o, int local) {
  if (o.device == "host") return CreateHostDevice();
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError(
        "--device=cuda but no CUDA device is visible (or baton was built "
        "without CUDA)");
  }
  return CreateCudaDevice(o.backend == "nccl" ? local % count : 0);
}

int RunInproc(const Options& o) {
  auto device = MakeDevice(o, 0);
  if (!device.ok()) return Fail(device.status());
  CommConfig base;
  base.device = device->get();
  base.group = "bench";
  base.timeout = absl::Seconds(o.timeout_s);
  base.inproc_event_protocol = o.inproc_events != 0;
  auto comms = CreateInprocGroup(o.nranks, base);
  if (!comms.ok()) return Fail(comms.status());
  std::vector<RankCtx> ctx(o.nranks);
  std::vector<Status> status(o.nranks);
  std::vector<std::vector<Row>> rows(o.nranks);
  std::vector<Communicator::Limit> limits(o.nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.nranks; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> Status {
        ctx[r].rank = r;
        ctx[r].n = o.nranks;
        ctx[r].device = device->get();
        BATON_ASSIGN_OR_RETURN(ctx[r].stream, (*device)->CreateStream());
        ctx[r].comm = std::move((*comms)[r]);
        return Run(ctx[r], o, &rows[r], &limits[r]);
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : status) {
    if (!s.ok()) return Fail(s);
  }
  double concurrent = 0;
  if (o.device == "host" && o.nranks > 1 && !rows[0].empty()) {
    const size_t bytes = std::max<size_t>(4096, rows[0].back().size / o.nranks);
    concurrent = ConcurrentCopyGbps(bytes, std::min(o.nranks, 64), 5);
  }
  // Ranks on a GPU share its memory (host ranks keep the memcpy limit and
  // the concurrent-memcpy line).
  const bool shared_device = (*device)->kind() == DeviceKind::kCuda;
  return Report(o, o.nranks, rows[0], limits[0],
                absl::StrCat("#  ", o.nranks, " ranks as threads on ",
                             (*device)->name(), "\n"),
                concurrent, shared_device);
}

int RunProcessRank(const Options& o) {
  auto info = LaunchInfoFromEnv();
  LaunchInfo li;
  if (info.ok()) {
    li = *info;
  } else if (absl::IsNotFound(info.status()) && o.nranks == 1) {
    auto port = PickFreePort();
    if (!port.ok()) return Fail(port.status());
    li.store_port = *port;
  } else {
    return Fail(info.status());
  }
  if (li.world_size != o.nranks) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "WORLD_SIZE=", li.world_size, " but --nranks=", o.nranks)));
  }
  auto store = TcpStore::Create(li, absl::Seconds(o.timeout_s));
  if (!store.ok()) return Fail(store.status());
  auto device = MakeDevice(o, li.local_rank);
  if (!device.ok()) return Fail(device.status());
  RankCtx ctx;
  ctx.rank = li.rank;
  ctx.n = li.world_size;
  ctx.device = device->get();
  auto stream = (*device)->CreateStream();
  if (!stream.ok()) return Fail(stream.status());
  ctx.stream = std::move(*stream);
  CommConfig cfg;
  cfg.backend = o.backend;
  cfg.rank = li.rank;
  cfg.size = li.world_size;
  cfg.device = device->get();
  cfg.store = store->get();
  cfg.group = "bench";
  cfg.timeout = absl::Seconds(o.timeout_s);
  auto comm = CreateCommunicator(cfg);
  if (!comm.ok()) return Fail(comm.status());
  ctx.comm = std::move(*comm);
  std::vector<Row> rows;
  Communicator::Limit limit;
  Status s = Run(ctx, o, &rows, &limit);
  if (!s.ok()) return Fail(s);
  int rc = 0;
  if (ctx.rank == 0) {
    rc = Report(o, ctx.n, rows, limit,
                absl::StrCat("#  ", ctx.n, " ranks as processes; rank 0 on ",
                             (*device)->name(), "\n"));
  }
  ctx.comm.reset();
  (void)(*store)->Barrier("bench/end", absl::Seconds(o.timeout_s));
  return rc;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("collectives");
  baton::Options o;
  if (int rc = baton::Parse(argc, argv, &o); rc != 0) return rc;
  if (o.backend == "inproc") return baton::RunInproc(o);
  // ucx / nccl: one process per rank. Without a launch environment, start
  // them through the launcher (this same binary, same flags).
  if (std::getenv("RANK") == nullptr && o.nranks > 1) {
    baton::LaunchOptions lo;
    lo.nproc = o.nranks;
    lo.argv.push_back(baton::SelfPath());
    for (int i = 1; i < argc; ++i) lo.argv.push_back(argv[i]);
    lo.prefix_output = false;  // only rank 0 prints; keep nccl-tests' format
    auto r = baton::LaunchLocal(lo);
    if (!r.ok()) return baton::Fail(r.status());
    if (!r->summary.empty()) std::fprintf(stderr, "%s", r->summary.c_str());
    return r->exit_code;
  }
  return baton::RunProcessRank(o);
}
