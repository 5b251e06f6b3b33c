// The rematerialization graph's simulator against hand-worked costs and peaks, its refusals, and the schedule
// cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "memory/remat/cache.h"
#include "memory/remat/graph.h"
#include "memory/remat/milp.h"

using namespace tessera;
using namespace tessera::memory::remat;

namespace {

Graph make(std::vector<std::pair<int64_t, std::vector<int>>> nodes, std::vector<double> costs = {}) {
  Graph g;
  for (size_t k = 0; k < nodes.size(); ++k) {
    g.nodes.push_back({"", costs.empty() ? 1.0 : costs[k], nodes[k].first, nodes[k].second});
  }
  return g;
}

BoolMatrix keeps(int n, std::vector<std::vector<int>> per_stage) {
  BoolMatrix s(n, std::vector<std::uint8_t>(n, 0));
  for (int t = 0; t < n; ++t) {
    for (int i : per_stage[t])
      s[t][i] = 1;
  }
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// 0 -> 1 -> 2 with 10, 20, 30 bytes and costs 1, 2, 3.
TEST(RematSimulator, ChainKeepingEverythingAndRecomputingEverything) {
  const Graph g = make({{10, {}}, {20, {0}}, {30, {1}}}, {1, 2, 3});
  // Stage 1 holds 0 and computes 1 (30), frees 0; stage 2 holds 1 and computes 2: 20 + 30 = 50.
  const auto all = simulate_schedule(g, keep_everything_schedule(g));
  EXPECT_EQ(all.cost, 6);
  EXPECT_EQ(all.peak_bytes, 50);
  EXPECT_EQ(all.computations, 3);
  // Nothing kept: stage t recomputes 0..t, freeing each input after its reader; stage 2 peaks at 1 and 2
  // together (0 is freed once 1 ran): 50 again, for 1 + 3 + 6 = 10.
  const auto none = simulate_schedule(g, minimal_recompute(g, keeps(3, {{}, {}, {}})));
  EXPECT_EQ(none.cost, 10);
  EXPECT_EQ(none.peak_bytes, 50);
  EXPECT_EQ(none.computations, 6);
}

// 0 -> {1, 2} -> 3 with 10, 30, 20, 5 bytes and costs 1, 2, 3, 4.
TEST(RematSimulator, Diamond) {
  const Graph g = make({{10, {}}, {30, {0}}, {20, {0}}, {5, {1, 2}}}, {1, 2, 3, 4});
  // Stage 2 holds 0 and 1 (40) and computes 2: 60, then frees 0; stage 3: 50
  // + 5.
  const auto all = simulate_schedule(g, keep_everything_schedule(g));
  EXPECT_EQ(all.cost, 10);
  EXPECT_EQ(all.peak_bytes, 60);
  // Drop 1 after stage 1 and recompute it (and 0) in stage 3: stage 1 frees 1 at once (40 peak), stage 2
  // holds 0 only (10 + 20 = 30), stage 3 holds 2 (20), computes 0 (30) and 1 (60), frees 0 (50), computes 3
  // (55). The later of 1 and 2 always meets the other and 0: 60 either way.
  const auto recomputed = simulate_schedule(g, minimal_recompute(g, keeps(4, {{}, {0}, {0}, {2}})));
  EXPECT_EQ(recomputed.cost, 1 + 2 + 3 + (1 + 2 + 4));
  EXPECT_EQ(recomputed.peak_bytes, 60);
}

// 0 -> 1 -> 2 -> 3 -> 4 and 0 -> 4: a 50-byte value read at the start and at the end.
TEST(RematSimulator, LongSkipEdgeIsCheaperToRecomputeThanToHold) {
  const Graph g = make({{50, {}}, {10, {0}}, {10, {1}}, {10, {2}}, {0, {3, 0}}});
  // Holding 0 throughout: stages 2 and 3 hold 0 and the previous node and compute one: 70.
  const auto all = simulate_schedule(g, keep_everything_schedule(g));
  EXPECT_EQ(all.cost, 5);
  EXPECT_EQ(all.peak_bytes, 70);
  // Recompute 0 in stage 4: stage 1 peaks at 60 and frees 0, stages 2-3 at 20, stage 4 holds 3 (10) and
  // computes 0 (60) and 4 (60).
  const auto re = simulate_schedule(g, minimal_recompute(g, keeps(5, {{}, {0}, {1}, {2}, {3}})));
  EXPECT_EQ(re.cost, 6);
  EXPECT_EQ(re.peak_bytes, 60);
  // And the MILP finds exactly that trade at a budget of 60, and nothing below it.
  const auto sol = solve_milp(g, 60);
  ASSERT_EQ(sol.status, SolveStatus::Optimal);
  EXPECT_EQ(sol.cost, 6);
  EXPECT_EQ(sol.peak_bytes, 60);
  const auto least = minimum_budget(g);
  EXPECT_TRUE(least.proven);
  EXPECT_EQ(least.bytes, 60);
  EXPECT_EQ(solve_milp(g, 59).status, SolveStatus::Infeasible);
  EXPECT_NE(error_of([&] { plan_rematerialization(g, 59); }).find("smallest budget that works is 60 bytes"),
            std::string::npos);
}

TEST(RematSimulator, RefusesBrokenGraphsAndSchedules) {
  EXPECT_NE(error_of([] { check_graph(make({{1, {}}, {1, {1}}})); }).find("topological"), std::string::npos);
  EXPECT_NE(error_of([] { check_graph(make({{1, {1}}, {1, {0}}})); }).find("topological"), std::string::npos);
  EXPECT_NE(error_of([] { check_graph(make({{-1, {}}})); }).find("must not be negative"), std::string::npos);
  EXPECT_NE(error_of([] { check_graph(make({{1, {}}, {1, {0, 0}}})); }).find("twice"), std::string::npos);
  EXPECT_NE(error_of([] { check_graph(make({{1, {}}}, {-2})); }).find("cost"), std::string::npos);
  EXPECT_NE(error_of([] { check_graph(Graph{}); }).find("at least one node"), std::string::npos);

  const Graph g = make({{10, {}}, {20, {0}}, {30, {1}}});
  auto bad = keep_everything_schedule(g);
  bad.S[2][1] = 0;  // stage 2 computes 2 without its input
  EXPECT_NE(error_of([&] { simulate_schedule(g, bad); }).find("input node 1 is not resident"), std::string::npos);
  bad = keep_everything_schedule(g);
  bad.R[1][0] = 1;  // recomputes what it keeps
  EXPECT_NE(error_of([&] { simulate_schedule(g, bad); }).find("recomputes node 0"), std::string::npos);
  // Node 0 is read by nobody, so stage 1 neither computes nor holds it.
  const Graph unread = make({{10, {}}, {20, {}}, {30, {1}}});
  bad = keep_everything_schedule(unread);
  bad.S[2][0] = 1;
  const auto msg = error_of([&] { simulate_schedule(unread, bad); });
  EXPECT_NE(msg.find("keeps node 0, which is not resident at the end of stage 1"), std::string::npos) << msg;
  bad = keep_everything_schedule(g);
  bad.R[1][1] = 0;
  EXPECT_NE(error_of([&] { simulate_schedule(g, bad); }).find("must compute node 1"), std::string::npos);
}

TEST(RematCache, RoundTripsAndMissesOnAnotherGraphOrBudget) {
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_remat_cache_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "schedule.json";
  const Graph g = make({{50, {}}, {10, {0}}, {10, {1}}, {10, {2}}, {0, {3, 0}}});
  EXPECT_FALSE(load_solution(path, g, 60).has_value());  // no file: a miss
  const auto sol = solve_milp(g, 60);
  ASSERT_TRUE(sol.has_schedule());
  save_solution(path, g, 60, sol);
  const auto back = load_solution(path, g, 60);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->schedule, sol.schedule);
  EXPECT_EQ(back->status, sol.status);
  EXPECT_EQ(back->cost, sol.cost);
  EXPECT_EQ(back->peak_bytes, sol.peak_bytes);

  EXPECT_FALSE(load_solution(path, g, 61).has_value());
  Graph other = g;
  other.nodes[2].bytes = 11;
  EXPECT_FALSE(load_solution(path, other, 60).has_value());
  other = g;
  other.nodes[3].cost = 2;
  EXPECT_FALSE(load_solution(path, other, 60).has_value());
  other = g;
  other.nodes[4].inputs = {3};
  EXPECT_FALSE(load_solution(path, other, 60).has_value());
  other = g;
  other.nodes[1].name = "renamed";  // names do not decide a schedule
  EXPECT_TRUE(load_solution(path, other, 60).has_value());

  // A file cut short, and one whose schedule was edited, are errors naming the file.
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(path, std::ios::trunc);
    out << text.substr(0, text.size() / 2);
  }
  auto msg = error_of([&] { load_solution(path, g, 60); });
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  save_solution(path, g, 60, sol);
  auto edited = sol;
  edited.peak_bytes = 55;
  save_solution(path, g, 60, edited);
  msg = error_of([&] { load_solution(path, g, 60); });
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}
