// The step profiler (core/profiler.h): self time per category, so nested scopes are not counted
// twice and the categories add up to the step; nothing recorded outside a step or without a
// profiler; the trace events parse as the Chrome trace format.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/profiler.h"

namespace tessera {
namespace {

void busy_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

size_t index(ProfileCategory c) { return static_cast<size_t>(c); }

TEST(Profiler, NestedScopesCountTheirOwnTimeOnceAndTheCategoriesAddUpToTheStep) {
  Profiler p;
  p.begin_step(2);
  {
    const ProfileScope phase(&p, "optimizer step", ProfileCategory::Optimizer);
    busy_for(std::chrono::microseconds(2000));
    const ProfileScope wait(&p, "all_reduce", ProfileCategory::Communication);
    busy_for(std::chrono::microseconds(3000));
  }
  {
    const ProfileScope phase(&p, "forward", ProfileCategory::Other, 0, 0);
    const ProfileScope gemm(&p, "ops::linear_forward", ProfileCategory::Gemm);
    busy_for(std::chrono::microseconds(1000));
  }
  p.end_step();
  ASSERT_EQ(p.steps(), 1);
  const auto ms = p.category_ms();
  EXPECT_GE(ms[index(ProfileCategory::Communication)], 3.0);
  EXPECT_GE(ms[index(ProfileCategory::Optimizer)], 2.0);
  // The wait inside the optimizer step is not the optimizer's.
  EXPECT_LT(ms[index(ProfileCategory::Optimizer)], 2.0 + 3.0);
  EXPECT_GE(ms[index(ProfileCategory::Gemm)], 1.0);
  double sum = 0;
  for (double m : ms) sum += m;
  EXPECT_NEAR(sum, p.step_ms(), 1e-9);
  EXPECT_GE(p.step_ms(), 6.0);
}

TEST(Profiler, RecordsNothingOutsideAStepOrWithoutAProfiler) {
  Profiler p;
  { const ProfileScope before(&p, "ops::add_inplace", ProfileCategory::Elementwise); }
  { const ProfileScope none(nullptr, "ops::add_inplace", ProfileCategory::Elementwise); }
  EXPECT_TRUE(p.events().empty());
  EXPECT_EQ(current_profiler(), nullptr);
  { const ProfileScope unset("ops::add_inplace", ProfileCategory::Elementwise); }  // no current profiler
  EXPECT_EQ(p.steps(), 0);
  EXPECT_NE(p.table("t").find("no step was profiled"), std::string::npos);
}

TEST(Profiler, TheInstalledProfilerIsTheThreadsCurrentOneForItsScopeOnly) {
  Profiler p;
  p.begin_step(1);
  {
    const ProfilerInstall install(&p);
    EXPECT_EQ(current_profiler(), &p);
    std::thread([] { EXPECT_EQ(current_profiler(), nullptr); }).join();
    const ProfileScope op("ops::layernorm_forward", ProfileCategory::Norm);
  }
  EXPECT_EQ(current_profiler(), nullptr);
  p.end_step();
  ASSERT_EQ(p.events().size(), 2u);  // the op and the step
  EXPECT_STREQ(p.events()[0].name, "ops::layernorm_forward");
}

TEST(Profiler, TraceEventsAreCompleteEventsOfTheChromeTraceFormat) {
  Profiler p;
  p.begin_step(3);
  { const ProfileScope op(&p, "ops::linear_forward", ProfileCategory::Gemm, 1, 0); }
  p.end_step();
  const nlohmann::json events = nlohmann::json::parse("[" + p.trace_events_json(1, "rank 1") + "]");
  int complete = 0;
  for (const nlohmann::json& e : events) {
    EXPECT_EQ(e["pid"], 1);
    EXPECT_EQ(e["tid"], 0);
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_EQ(e["args"]["step"], 3);
    if (e["name"] == "ops::linear_forward") {
      EXPECT_EQ(e["cat"], "gemm");
      EXPECT_EQ(e["args"]["unit"], 1);
    } else {
      EXPECT_EQ(e["cat"], "step");
    }
  }
  EXPECT_EQ(complete, 2);
  const std::string table = p.table("profile");
  EXPECT_NE(table.find("gemm"), std::string::npos);
  EXPECT_NE(table.find("communication"), std::string::npos);
  EXPECT_NE(table.find("other"), std::string::npos);
}

}  // namespace
}  // namespace tessera
