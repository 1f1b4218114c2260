#include "baton/memory/step_dag.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::memory {
namespace {

using ::testing::HasSubstr;

// Brute force: DFS over explicit edges plus FIFO edges per stream.
std::vector<std::vector<bool>> Closure(const StepDag& dag) {
  const int n = static_cast<int>(dag.nodes.size());
  std::vector<std::vector<int>> succ(n);
  for (const DagEdge& e : dag.edges) succ[e.from].push_back(e.to);
  for (int v = 0; v < n; ++v) {
    for (int w = v + 1; w < n; ++w) {
      if (dag.nodes[w].stream == dag.nodes[v].stream) {
        succ[v].push_back(w);
        break;
      }
    }
  }
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (int s = 0; s < n; ++s) {
    std::vector<int> stack = succ[s];
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      if (reach[s][v]) continue;
      reach[s][v] = true;
      for (int w : succ[v]) stack.push_back(w);
    }
  }
  return reach;
}

TEST(HappensBefore, MatchesBruteForceOnRandomDags) {
  for (int seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    StepDag dag;
    const int n = 2 + rng() % 80;
    const int streams = 1 + rng() % 5;
    for (int v = 0; v < n; ++v) {
      dag.AddNode("n" + std::to_string(v), 10 * (rng() % streams));
    }
    const int edges = rng() % (2 * n);
    for (int i = 0; i < edges; ++i) {
      int a = rng() % n, b = rng() % n;
      if (a == b) continue;
      dag.AddEdge(std::min(a, b), std::max(a, b));
    }
    StatusOr<HappensBefore> hb = HappensBefore::Build(dag);
    ASSERT_TRUE(hb.ok()) << hb.status();
    const auto reach = Closure(dag);
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        ASSERT_EQ(hb->Before(a, b), reach[a][b])
            << "seed " << seed << " " << a << " -> " << b;
      }
    }
  }
}

TEST(HappensBefore, StreamsAreFifo) {
  StepDag dag;
  NodeId a = dag.AddNode("a", 0);
  NodeId b = dag.AddNode("b", 1);
  NodeId c = dag.AddNode("c", 0);
  StatusOr<HappensBefore> hb = HappensBefore::Build(dag);
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE(hb->Before(a, c));
  EXPECT_FALSE(hb->Before(a, b));  // issue order proves nothing
  EXPECT_FALSE(hb->Before(b, c));
  EXPECT_FALSE(hb->Before(a, a));
  EXPECT_EQ(hb->num_streams(), 2);
}

TEST(HappensBefore, RejectsBadGraphs) {
  StepDag cyc;
  cyc.AddNode("x", 0);
  cyc.AddNode("y", 1);
  cyc.AddNode("z", 1);
  cyc.AddEdge(0, 2);
  cyc.AddEdge(2, 1);
  cyc.AddEdge(1, 0);
  Status s = HappensBefore::Build(cyc).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cycle"));

  StepDag self;
  self.AddNode("loop", 0);
  self.AddEdge(0, 0);
  s = HappensBefore::Build(self).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'loop'"));

  StepDag back;
  back.AddNode("first", 0);
  back.AddNode("second", 1);
  back.AddEdge(1, 0);
  s = HappensBefore::Build(back).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("backwards"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'second'"));

  StepDag unknown;
  unknown.AddNode("only", 0);
  unknown.AddEdge(0, 5);
  s = HappensBefore::Build(unknown).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown node"));
}

}  // namespace
}  // namespace baton::memory
