// Measured timelines without running anything: timeline.json round trips and refuses what is not a
// timeline of its schedule; the measured bubble is the simulator's bubble (a simulated run read as
// a measured one gives the simulator's numbers back, and so do its measured costs); the p2p time
// and the bubble of a hand-timed run; the picture of a run beside its simulation.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "schedule/generators.h"
#include "schedule/measured_timeline.h"
#include "plan/pipeline/measured_run.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"
#include "../schedule/pipeline_test_util.h"

using namespace tessera;
using namespace tessera::pipeline;
using tessera::pipeline::test_util::pipeline_layout;

namespace {

// A simulated run written down as if it had been measured: every instruction with its simulated
// start and end.
MeasuredTimeline as_measured(const Schedule& s, const plan::SimulationResult& result) {
  MeasuredTimeline t;
  t.kind = s.kind;
  t.ranks = s.ranks;
  t.microbatches = s.microbatches;
  t.chunks = s.chunks;
  t.clock_uncertainty.assign(static_cast<size_t>(s.ranks), 0.0);
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<MeasuredInstruction> records;
    for (const plan::TimedInstruction& timed : result.timeline[static_cast<size_t>(r)]) {
      const Instruction& ins = s.programs[static_cast<size_t>(r)][timed.index];
      records.push_back({ins.op, ins.stage, ins.chunk, ins.microbatch, ins.tensor, ins.peer, timed.start, timed.end});
    }
    t.records.push_back(std::move(records));
  }
  return t;
}

// Per-stage costs that differ from stage to stage, as a real model's do (embedding first, head last).
plan::PipelineCosts uneven_costs(const Schedule& s) {
  plan::PipelineCosts c = plan::uniform_costs(s, 1.0, 2.0, s.split_backward ? 0.8 : 0.0);
  for (size_t st = 0; st < c.forward.size(); ++st) {
    c.forward[st] *= 1.0 + 0.1 * static_cast<double>(st);
    c.backward[st] *= 1.0 + 0.05 * static_cast<double>(st);
  }
  c.forward.back() *= 1.5;  // the head
  return c;
}

const config::ScheduleKind kSynchronous[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                                             ScheduleKind::ZeroBubbleH1};

std::string error_of(const std::string& text) {
  try {
    parse_measured_timeline(text, "timeline 't.json'");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MeasuredTimeline, JsonRoundTripsExactly) {
  for (ScheduleKind kind : kSynchronous) {
    const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
    const Schedule s = make_schedule(pipeline_layout(kind, 3, 6, v));
    plan::PipelineCosts costs = uneven_costs(s);
    costs.p2p = 0.1;
    MeasuredTimeline t = as_measured(s, plan::simulate_schedule(s, costs));
    t.clock_uncertainty = {0.0, 1.5e-5, 3.25e-6};
    for (auto& records : t.records)
      for (MeasuredInstruction& m : records) m.end += 1e-9 / 3;  // digits that must survive the text
    const std::string text = timeline_json(t);
    EXPECT_EQ(parse_measured_timeline(text, "test"), t) << schedule_name(kind);
    EXPECT_NE(text.find("\"op\": \"send\""), std::string::npos);
    EXPECT_NE(text.find("\"tensor\": \"activation\""), std::string::npos);
  }
}

TEST(MeasuredTimeline, ASimulatedRunMeasuresAsTheSimulatorSays) {
  for (ScheduleKind kind : kSynchronous) {
    const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
    const Schedule s = make_schedule(pipeline_layout(kind, 4, 8, v));
    const plan::PipelineCosts costs = uneven_costs(s);
    const plan::SimulationResult sim = plan::simulate_schedule(s, costs);
    const MeasuredTimeline t = as_measured(s, sim);
    const std::string what(schedule_name(kind));

    const plan::MeasuredBubble b = plan::measured_bubble(t);
    EXPECT_NEAR(b.fraction, sim.bubble_fraction, 1e-12) << what;
    EXPECT_NEAR(b.total, sim.total_time, 1e-12) << what;
    for (int r = 0; r < s.ranks; ++r) EXPECT_NEAR(b.bubble_per_rank[r], sim.bubble_per_rank[r], 1e-12) << what;

    // Every microbatch of a stage took the same time, so the medians are the costs themselves and
    // the simulation with them is the one measured.
    const plan::MeasuredComparison c = plan::compare_with_simulation(t);
    for (int st = 0; st < s.stages(); ++st) {
      EXPECT_NEAR(c.costs.costs.forward[st], costs.forward[st], 1e-12) << what << " stage " << st;
      EXPECT_NEAR(c.costs.costs.backward[st], costs.backward[st], 1e-12) << what << " stage " << st;
      if (s.split_backward) {
        EXPECT_NEAR(c.costs.costs.weight[st], costs.weight[st], 1e-12) << what;
      }
    }
    EXPECT_EQ(c.costs.costs.p2p, 0.0) << what << ": the simulated transfers took no time";
    EXPECT_NEAR(c.simulated.bubble_fraction, sim.bubble_fraction, 1e-12) << what;
    EXPECT_NEAR(c.measured.fraction, c.simulated.bubble_fraction, 1e-12) << what;

    // The picture: the measured ranks above the simulated ones, on one axis in milliseconds.
    const plan::Timeline picture = plan::comparison_timeline(t, c);
    ASSERT_EQ(picture.rows.size(), 2u * static_cast<size_t>(s.ranks)) << what;
    EXPECT_EQ(picture.rows.front().name, "measured, rank 0");
    EXPECT_EQ(picture.rows.back().name, fmt::format("simulated, rank {}", s.ranks - 1));
    EXPECT_EQ(picture.time_unit, "ms");
    EXPECT_NEAR(plan::timeline_end(picture), 1000 * sim.total_time, 1e-9) << what;
    EXPECT_NE(plan::render_svg(picture).find("measured, rank 3"), std::string::npos);
  }
}

// GPipe, p = 2, m = 1, timed by hand: rank 1 waits for the activation from 0 and gets it 0.3 after
// it was sent; rank 0 waits for the gradient, which arrives 0.2 after it was sent.
TEST(MeasuredTimeline, BubbleAndTransferTimeOfAHandTimedRun) {
  const Schedule s = make_schedule(pipeline_layout(ScheduleKind::GPipe, 2, 1));
  MeasuredTimeline t;
  t.kind = s.kind;
  t.ranks = 2;
  t.clock_uncertainty = {0, 0};
  const auto timed = [&](int rank, Op op, double start, double end) {
    for (const Instruction& ins : s.programs[static_cast<size_t>(rank)])
      if (ins.op == op) return MeasuredInstruction{ins.op, ins.stage, ins.chunk, ins.microbatch, ins.tensor, ins.peer, start, end};
    ADD_FAILURE() << "no " << op_name(op) << " on rank " << rank;
    return MeasuredInstruction{};
  };
  // Each rank's list in order: rank 0 F, send, recv, B, step; rank 1 recv, F, B, send, step.
  t.records.resize(2);
  for (const Instruction& ins : s.programs[0]) {
    const double start[] = {0.0, 1.0, 1.0, 3.4, 5.4}, end[] = {1.0, 1.0, 3.4, 5.4, 5.5};
    const int at = ins.op == Op::Forward ? 0 : ins.op == Op::Send ? 1 : ins.op == Op::Recv ? 2 : ins.op == Op::Backward ? 3 : 4;
    t.records[0].push_back(timed(0, ins.op, start[at], end[at]));
  }
  for (const Instruction& ins : s.programs[1]) {
    const double start[] = {0.0, 1.3, 2.2, 3.2, 3.2}, end[] = {1.3, 2.2, 3.2, 3.2, 3.3};
    const int at = ins.op == Op::Recv ? 0 : ins.op == Op::Forward ? 1 : ins.op == Op::Backward ? 2 : ins.op == Op::Send ? 3 : 4;
    t.records[1].push_back(timed(1, ins.op, start[at], end[at]));
  }
  const plan::MeasuredComparison c = plan::compare_with_simulation(t);
  // Busy: rank 0 F 1 + B 2 = 3, rank 1 F 0.9 + B 1 = 1.9; the step ends with rank 0's B at 5.4.
  EXPECT_DOUBLE_EQ(c.measured.total, 5.4);
  EXPECT_NEAR(c.measured.bubble_per_rank[0], (5.4 - 3.0) / 5.4, 1e-12);
  EXPECT_NEAR(c.measured.bubble_per_rank[1], (5.4 - 1.9) / 5.4, 1e-12);
  EXPECT_NEAR(c.measured.fraction, ((5.4 - 3.0) + (5.4 - 1.9)) / 2 / 5.4, 1e-12);
  EXPECT_EQ(c.costs.transfers, 2);
  EXPECT_EQ(c.costs.exposed_transfers, 2);
  EXPECT_NEAR(c.costs.costs.p2p, 0.25, 1e-12) << "the median of 0.3 and 0.2";
  // Simulated with those costs: F0 1, p2p 0.25, F1 0.9, B1 1, p2p 0.25, B0 2.
  EXPECT_NEAR(c.simulated.total_time, 1 + 0.25 + 0.9 + 1 + 0.25 + 2, 1e-12);
  const std::string report = plan::comparison_report(c);
  EXPECT_NE(report.find("bubble       measured 0.5463, simulated"), std::string::npos) << report;
}

TEST(MeasuredTimeline, WhatIsNoTimelineOfItsScheduleIsRefusedByName) {
  const Schedule s = make_schedule(pipeline_layout(ScheduleKind::OneFOneB, 2, 2));
  const MeasuredTimeline t = as_measured(s, plan::simulate_schedule(s, plan::uniform_costs(s, 1, 2, 0)));
  const std::string good = timeline_json(t);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_NE(error_of("{").find("timeline 't.json' is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("a JSON array, expected an object"), std::string::npos);
  EXPECT_NE(error_of(replaced("tessera pipeline timeline", "something else")).find("not a tessera pipeline timeline"),
            std::string::npos);
  EXPECT_NE(error_of(replaced("\"p\": 2", "\"q\": 2")).find("'p' is missing"), std::string::npos);
  EXPECT_NE(error_of(replaced("\"schedule\": \"1f1b\"", "\"schedule\": \"2f2b\"")).find("expected one of gpipe"),
            std::string::npos);
  EXPECT_NE(error_of(replaced("\"op\": \"forward\"", "\"op\": \"fwd\"")).find("'ranks[0][0].op' is \"fwd\""),
            std::string::npos);
  EXPECT_NE(error_of(replaced("\"start\": 0", "\"start\": -1")).find("'ranks[0][0].start' is -1"), std::string::npos);
  // A forward where the list has another microbatch's forward.
  EXPECT_NE(error_of(replaced("\"microbatch\": 0", "\"microbatch\": 1")).find("record 0 of rank 0 is 'forward stage 0 "
                                                                           "microbatch 1' but the schedule's"),
            std::string::npos);
  // Chunks on a schedule that has none: the layout's reason, named with the file.
  const std::string bad_shape = error_of(replaced("\"v\": 1", "\"v\": 2"));
  EXPECT_NE(bad_shape.find("timeline 't.json': no 1f1b schedule for p = 2, m = 2, v = 2"), std::string::npos)
      << bad_shape;
  // Numbers far beyond the records given are refused before a schedule is generated for them.
  EXPECT_NE(error_of(replaced("\"m\": 2", "\"m\": 1000000")).find("at least the 2000000 forwards and backwards"),
            std::string::npos);
}
