// Timelines of one process: the interpreter's recorder times every action of a program, in
// order, each start before its end; the records of the schedule's instructions span exactly their
// actions; timeline.json reads back the same; a step run without the recorder cannot be gathered.
#include <gtest/gtest.h>

#include "schedule/generators.h"
#include "schedule/measured_timeline.h"
#include "parallel/pipeline_timeline.h"
#include "parity_harness.h"

using namespace tessera;
using tessera::testing::ParityCase;
using tessera::testing::RunRecord;

namespace {

ParityCase timed_case(config::ScheduleKind kind, config::RecomputePolicy recompute) {
  ParityCase c;
  c.model = tessera::testing::gpt2_odd_config();
  c.model.n_layer = 3;
  c.schedule = kind;
  c.micros = 3;
  c.global_batch = 6;
  c.steps = 2;
  c.recompute.policy = recompute;
  c.record_timeline = true;
  return c;
}

}  // namespace

TEST(Timeline, TheRecorderTimesEveryActionInOrder) {
  for (const auto& [kind, recompute] :
       {std::pair{config::ScheduleKind::OneFOneB, config::RecomputePolicy::Full},
        std::pair{config::ScheduleKind::GPipe, config::RecomputePolicy::None},
        std::pair{config::ScheduleKind::ZeroBubbleH1, config::RecomputePolicy::None}}) {
    const ParityCase c = timed_case(kind, recompute);
    const std::string what(config::schedule_name(kind));
    const RunRecord run = tessera::testing::run_data_parallel(c, nullptr);
    const std::vector<exec::Action>& actions = run.program.actions;
    ASSERT_EQ(run.spans.size(), actions.size()) << what << ": one span per action of the program";
    double previous_end = 0;
    int recomputed = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      const exec::TimelineRecorder::Span& span = run.spans[i];
      EXPECT_GE(span.start, previous_end) << what << ": action " << i << " (" << exec::describe(actions[i])
                                          << ") starts before the one before it ended";
      EXPECT_LE(span.start, span.end) << what << ": action " << i << " ends before it starts";
      previous_end = span.end;
      recomputed += actions[i].phase == exec::Phase::Recompute;
    }
    if (recompute == config::RecomputePolicy::Full) {
      EXPECT_GT(recomputed, 0) << what << ": recomputations are timed too";
    }

    // The timeline: one record per instruction of the list, spanning exactly its actions.
    config::ParallelLayout layout;
    layout.schedule = kind;
    layout.global_batch = c.micros;
    const pipeline::Schedule schedule = pipeline::make_schedule(layout);
    const pipeline::MeasuredTimeline& t = run.timeline;
    ASSERT_NO_THROW(pipeline::check_follows(t, schedule)) << what;
    EXPECT_EQ(t.kind, kind);
    EXPECT_EQ(t.ranks, 1);
    EXPECT_EQ(t.microbatches, c.micros);
    for (size_t ins = 0; ins < schedule.programs[0].size(); ++ins) {
      double first = -1, last = -1;
      for (size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].instruction != static_cast<int>(ins)) continue;
        if (first < 0) first = run.spans[i].start;
        last = run.spans[i].end;
      }
      ASSERT_GE(first, 0) << what << ": instruction " << ins << " ran no action";
      EXPECT_EQ(t.records[0][ins].start, first) << what << ": instruction " << ins;
      EXPECT_EQ(t.records[0][ins].end, last) << what << ": instruction " << ins;
    }

    EXPECT_EQ(pipeline::parse_measured_timeline(pipeline::timeline_json(t), "test"), t) << what << ": round trip";
  }
}

TEST(Timeline, AStepRunWithoutTheRecorderCannotBeGathered) {
  const ParityCase c = timed_case(config::ScheduleKind::OneFOneB, config::RecomputePolicy::None);
  const RunRecord run = tessera::testing::run_data_parallel(c, nullptr);
  config::ParallelLayout layout;
  layout.global_batch = c.micros;
  const pipeline::Schedule schedule = pipeline::make_schedule(layout);
  const exec::TimelineRecorder never_started;
  try {
    parallel::gather_timeline(schedule, run.program, never_started, nullptr);
    FAIL() << "gathered a timeline nobody recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record the step with StepOptions::timeline"), std::string::npos) << e.what();
  }
}
