// The closed forms against the schedule simulator playing the generated schedules.
#include <gtest/gtest.h>

#include "plan/published.h"
#include "plan/simulated_pipeline.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using config::ScheduleKind;

namespace {
struct Case {
  int p;
  int64_t m;
  int v;
  ScheduleKind schedule;

  config::ParallelLayout layout() const { return test_util::pipeline_layout(schedule, p, m, v); }
};
const Case kCases[] = {{1, 8, 1, ScheduleKind::OneFOneB},     {4, 16, 1, ScheduleKind::OneFOneB},
                       {8, 8, 1, ScheduleKind::OneFOneB},     {4, 16, 1, ScheduleKind::GPipe},
                       {2, 48, 2, ScheduleKind::Interleaved}, {4, 56, 3, ScheduleKind::Interleaved},
                       {8, 96, 5, ScheduleKind::Interleaved}, {16, 144, 2, ScheduleKind::Interleaved}};
}  // namespace

TEST(PlanSimulatedPipeline, MakespanEqualsClosedFormWithoutTransfers) {
  PipelineModel sim = simulated_pipeline();
  for (const Case& c : kCases) {
    const config::ParallelLayout s = c.layout();
    StageTimes t{1.0, 2.5, 0.0};
    EXPECT_NEAR(sim.makespan(s, t), closed_form_makespan(s, t), 1e-9 * closed_form_makespan(s, t))
        << "p=" << c.p << " m=" << c.m << " v=" << c.v;
  }
}

TEST(PlanSimulatedPipeline, TransfersCostNoMoreThanTheClosedFormCharges) {
  // The closed form puts every transfer on the critical path; overlapped sends can only do better.
  PipelineModel sim = simulated_pipeline();
  for (const Case& c : kCases) {
    const config::ParallelLayout s = c.layout();
    StageTimes t{1.0, 2.5, 0.02};
    EXPECT_LE(sim.makespan(s, t), closed_form_makespan(s, t) * (1 + 1e-12)) << "p=" << c.p << " v=" << c.v;
    EXPECT_GE(sim.makespan(s, t), closed_form_makespan(s, StageTimes{1.0, 2.5, 0.0})) << "p=" << c.p << " v=" << c.v;
  }
}

TEST(PlanSimulatedPipeline, InflightCountsEqualTheClosedForms) {
  PipelineModel sim = simulated_pipeline();
  for (const Case& c : kCases) {
    const config::ParallelLayout s = c.layout();
    for (int stage : {0, c.p / 2, c.p - 1}) {
      EXPECT_EQ(sim.inflight_chunks(s, stage), closed_form_inflight_chunks(s, stage))
          << "p=" << c.p << " m=" << c.m << " v=" << c.v << " stage " << stage;
    }
  }
}

TEST(PlanSimulatedPipeline, Table1StaysWithinFifteenPercent) {
  ClusterSpec c = test_util::a100();
  for (const auto& a : table1_accuracy(c, simulated_pipeline())) {
    EXPECT_LE(std::abs(a.error), 0.15) << a.row.config;
    const TimeBreakdown& t = a.predicted.time;
    EXPECT_NEAR(t.compute + t.tp_comm + t.pp_comm + t.bubble + t.dp_comm + t.optimizer, t.step, 1e-9 * t.step) << a.row.config;
  }
}
