#include "baton/scheduler/testing/step_trace_check.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "baton/scheduler/step_trace.h"
#include "baton/scheduler/testing/toy_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler::testing {

void CheckStepTraceOfToyRun(const std::string& preset, const ExecutorOptions& base) {
  const int ranks = 2, steps = 2;
  Policy p = *PolicyPreset(preset);
  p.param_dtype = DataType::kF32;
  const ModelSpec spec = *ModelPreset("micro");
  auto group = CreateInprocGroup(ranks);
  ASSERT_TRUE(group.ok());
  auto built = BuildStepGraph(spec, p, ranks);
  ASSERT_TRUE(built.ok());
  auto graph = std::make_shared<const StepGraph>(*std::move(built));
  StepTrace trace;
  std::vector<NodeObserver*> observers;
  for (int r = 0; r < ranks; ++r) observers.push_back(trace.ForRank(r, *graph));
  ToyModel toy(ranks);
  std::vector<std::string> errors(ranks);
  RunRanks(ranks, [&](int r) {
    ExecutorOptions options = base;
    options.observer = observers[r];
    auto ex = Executor::Create(graph, *group->device, *group->comms[r], options);
    if (!ex.ok()) {
      errors[r] = ex.status().ToString();
      return;
    }
    Status st = (*ex)->InitParameters([](const ParamSlot& slot, float* out) {
      for (int64_t i = 0; i < slot.numel; ++i) out[i] = InitialValue(slot, i);
    });
    for (int s = 0; st.ok() && s < steps; ++s) st = (*ex)->Step(toy.Callbacks(r));
    if (st.ok()) st = (*ex)->Synchronize();
    if (!st.ok()) {
      errors[r] = st.ToString();
      group->comms[r]->Abort();
    }
  });
  for (int r = 0; r < ranks; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;

  const auto j = nlohmann::json::parse(trace.Json());
  const int nodes = static_cast<int>(graph->nodes.size());
  // (rank, step, node) -> [start, end] of the node's own slice.
  std::map<std::tuple<int, int64_t, int>, std::pair<double, double>> slices;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<std::pair<int, int>, std::string> track_names;
  std::map<std::string, int> node_index;
  for (int i = 0; i < nodes; ++i) node_index[graph->nodes[i].name] = i;
  for (const auto& e : j.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M") {
      if (e.at("name") == "thread_name") {
        track_names[{pid, e.at("tid").get<int>()}] = e.at("args").at("name");
      }
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X");
    const int tid = e.at("tid");
    const double ts = e.at("ts"), dur = e.at("dur");
    ASSERT_GE(dur, 0);
    tracks[{pid, tid}].push_back({ts, ts + dur});
    const std::string cat = e.at("cat");
    if (cat == "wait") continue;
    ASSERT_TRUE(cat == "compute" || cat == "copy") << cat;
    ASSERT_EQ(node_index.count(e.at("name")), 1u) << e.at("name");
    const int i = node_index[e.at("name")];
    const bool host_update = p.zenflow && graph->nodes[i].kind == NodeKind::kCast;
    EXPECT_EQ(host_update ? graph->num_streams : graph->nodes[i].stream.index(), tid)
        << graph->nodes[i].name;
    EXPECT_EQ(std::string(cat), IsCompute(graph->nodes[i].kind) ||
                                        graph->nodes[i].kind == NodeKind::kOptimizer ||
                                        graph->nodes[i].kind == NodeKind::kCast ||
                                        graph->nodes[i].kind == NodeKind::kAccumulate
                                    ? "compute"
                                    : "copy");
    const auto key = std::make_tuple(pid, e.at("args").at("step").get<int64_t>(), i);
    EXPECT_EQ(slices.count(key), 0u) << "twice: " << graph->nodes[i].name;
    slices[key] = {ts, ts + dur};
  }
  EXPECT_EQ(slices.size(), static_cast<size_t>(ranks * steps * nodes));
  std::vector<std::string> want = {"compute"};
  if (graph->num_streams == 2 || graph->num_streams == 4) want.push_back("comm");
  if (graph->num_streams == 3 || graph->num_streams == 5) {
    want.insert(want.end(), {"all-gather", "reduce-scatter"});
  }
  if (graph->offload()) want.insert(want.end(), {"host-copy", "host"});
  if (p.zenflow) want.push_back("host-update");
  for (int r = 0; r < ranks; ++r) {
    for (int s = 0; s < static_cast<int>(want.size()); ++s) {
      EXPECT_EQ(track_names[std::make_pair(r, s)], want[s]) << "rank " << r << " track " << s;
    }
    EXPECT_EQ(track_names.count(std::make_pair(r, static_cast<int>(want.size()))), 0u);
  }
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
      EXPECT_LE(spans[k - 1].second, spans[k].first + 1e-3)
          << "overlap on rank " << track.first << " stream " << track.second;
    }
  }
  int cross = 0;
  for (const auto& [key, span] : slices) {
    const auto [rank, step, i] = key;
    for (int w : graph->nodes[i].waits) {
      const auto src = slices.find({rank, step, w});
      ASSERT_NE(src, slices.end());
      EXPECT_GE(span.first, src->second.second - 1e-3)
          << graph->nodes[i].name << " started before " << graph->nodes[w].name << " ended";
      ++cross;
    }
  }
  EXPECT_GT(cross, 0) << "the graph has no cross-stream waits to check";
}

}  // namespace baton::scheduler::testing
