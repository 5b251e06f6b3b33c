// The simulator against closed forms (uniform costs, zero p2p unless stated) and hand-computed
// timelines for uneven costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "core/check.h"
#include "schedule/generators.h"
#include "schedule/validator.h"
#include "plan/pipeline/closed_form.h"
#include "plan/pipeline/simulation_report.h"
#include "plan/pipeline/simulator.h"
#include "../schedule/pipeline_test_util.h"

using namespace tessera;
using namespace tessera::pipeline;
using tessera::pipeline::test_util::pipeline_layout;
using namespace tessera::plan;

namespace {

constexpr double kTol = 1e-9;

SimulationResult run(const Schedule& s, double tf, double tb, double tw, TransferMode mode = TransferMode::Async,
                     double p2p = 0.0) {
  PipelineCosts c = uniform_costs(s, tf, tb, tw, p2p);
  c.mode = mode;
  return simulate_schedule(s, c);
}

}  // namespace

// GPipe and 1F1B, t_b = 2 t_f: total (m + p - 1)(t_f + t_b), every rank idle (p - 1)/(m + p - 1) of
// it, with both executor models. Peak live microbatches: m for GPipe, min(p - r, m) <= p for 1F1B.
TEST(PipelineSimulator, GPipeAndOneFOneBMatchTheClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (TransferMode mode : {TransferMode::Async, TransferMode::Blocking}) {
          const Schedule s = make_schedule(pipeline_layout(kind, p, m));
          const double tf = 0.7, tb = 1.4;
          const SimulationResult r = run(s, tf, tb, 0.0, mode);
          const std::string where = std::string(schedule_name(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
          ASSERT_NEAR(r.total_time, (m + p - 1) * (tf + tb), kTol) << where;
          const double bubble = static_cast<double>(p - 1) / (m + p - 1);
          EXPECT_NEAR(r.bubble_fraction, bubble, kTol) << where;
          for (int rank = 0; rank < p; ++rank) {
            EXPECT_NEAR(r.bubble_per_rank[rank], bubble, kTol) << where;
            const int expected = kind == ScheduleKind::GPipe ? m : std::min(p - rank, m);
            EXPECT_EQ(r.peak_alive[rank], expected) << where << " rank " << rank;
            EXPECT_NEAR(r.peak_activation[rank], expected, kTol) << where;
            EXPECT_LE(r.peak_alive[rank], kind == ScheduleKind::GPipe ? m : p);
          }
          EXPECT_NEAR(closed_form_bubble(s, tf, tb, 0.0)->fraction, bubble, kTol);
        }
}

// Interleaved with v chunks of t_f / v and t_b / v each: total m (t_f + t_b) + (p - 1)(t_f + t_b) / v,
// i.e. bubble / ideal time = (p - 1) / (v m), v times smaller than 1F1B's (p - 1) / m.
TEST(PipelineSimulator, InterleavedDividesTheBubbleByV) {
  int cases = 0;
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 16; m += p) {
        const Schedule s = make_interleaved(pipeline_layout(ScheduleKind::Interleaved, p, m, v));
        const double tf = 1.0, tb = 2.0;
        const SimulationResult r = run(s, tf, tb, 0.0);
        const double ideal = m * (tf + tb);
        const std::string where = "p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
        ASSERT_NEAR(r.total_time, ideal + (p - 1) * (tf + tb) / v, kTol) << where;
        EXPECT_NEAR((r.total_time - ideal) / ideal, static_cast<double>(p - 1) / (v * m), kTol) << where;
        EXPECT_NEAR(r.bubble_fraction, closed_form_bubble(s, tf, tb, 0.0)->fraction, kTol) << where;
        // First rank's activations: p (1 + (p - 1) / (p v)) microbatches, Korthikanti et al.'s
        // interleaving factor (there the chunk count is written m); v = 1 is plain 1F1B.
        if (v > 1 && m > p) {
          EXPECT_NEAR(r.peak_activation[0], p * (1.0 + (p - 1.0) / (p * v)), kTol) << where;
        }
        ++cases;
      }
  EXPECT_GT(cases, 100);
}

// Blocking send/recv never beats isend/irecv. With uniform costs it still reaches the async times
// for every GPipe, 1F1B, 2BW and ZB-H1 shape of the sweep (the receiver is free when the sender
// finishes); interleaved shapes lose time wherever a tensor is ready while its receiver is in the
// middle of a compute, since the lists send as soon as the tensor exists (p = 2, m = 8, v = 2:
// 31.5 against 25.5).
TEST(PipelineSimulator, BlockingTransfersNeverBeatAsyncOnes) {
  int slower = 0;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::PipeDream2BW, ScheduleKind::ZeroBubbleH1})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (int v = 1; v <= 4; ++v) {
          Schedule s;
          try {
            s = make_schedule(pipeline_layout(kind, p, m, v), {.steps = kind == ScheduleKind::PipeDream2BW ? 3 : 1});
          } catch (const Error&) {
            continue;
          }
          const double async = run(s, 1, 2, 1).total_time;
          const double blocking = run(s, 1, 2, 1, TransferMode::Blocking).total_time;
          const std::string where = std::string(schedule_name(kind)) + " p=" + std::to_string(p) +
                                    " m=" + std::to_string(m) + " v=" + std::to_string(v);
          if (kind == ScheduleKind::Interleaved) {
            EXPECT_GE(blocking, async - kTol) << where;
            slower += blocking > async + kTol ? 1 : 0;
          } else {
            EXPECT_NEAR(blocking, async, kTol) << where;
          }
        }
  EXPECT_EQ(slower, 57);
  const Schedule s = make_interleaved(pipeline_layout(ScheduleKind::Interleaved, 2, 8, 2));
  EXPECT_NEAR(run(s, 1, 2, 0).total_time, 25.5, kTol);
  EXPECT_NEAR(run(s, 1, 2, 0, TransferMode::Blocking).total_time, 31.5, kTol);
}

// Sends sit right after the compute that made their tensor, so under isend/irecv (no p2p cost) a
// compute waits for nothing but its inputs, whatever the stages cost: it starts when the rank's
// previous compute ends or when its remote input was made, whichever is later. Uneven random costs,
// every generator, with and without recompute.
TEST(PipelineSimulator, AsyncTransfersLeaveOnlyDataflowWaitsWhateverTheCosts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> spread(0.5, 2.0), share(0.2, 0.8);
  int checked = 0;
  const auto shapes = [](int p) { return std::vector<int>{1, p, 2 * p, 2 * p + 1}; };
  test_util::for_each_schedule(2, 5, 3, shapes, [&](const Schedule& s, const std::string& where) {
    PipelineCosts c = uniform_costs(s, 1, 2, 1);
    for (int stage = 0; stage < s.stages(); ++stage) {
      const auto at = static_cast<std::size_t>(stage);
      c.forward[at] = spread(rng);
      c.backward[at] = 2 * spread(rng);
      c.weight[at] = share(rng) * c.backward[at];
      c.recompute[at] = c.forward[at];
    }
    const SimulationResult result = simulate_schedule(s, c);
    // When each (op, stage, microbatch) ended; B and its input half both pass the gradient on.
    std::map<std::tuple<Op, int, int>, double> ended;
    for (int r = 0; r < s.ranks; ++r)
      for (const TimedInstruction& t : result.timeline[r]) {
        const Instruction& ins = s.programs[r][t.index];
        const Op op = ins.op == Op::BackwardInput ? Op::Backward : ins.op;
        ended[{op, ins.stage, ins.microbatch}] = t.end;
      }
    for (int r = 0; r < s.ranks; ++r) {
      double previous_end = 0;
      for (const TimedInstruction& t : result.timeline[r]) {
        const Instruction& ins = s.programs[r][t.index];
        if (!is_compute(ins.op)) continue;
        double ready = previous_end;
        if (ins.op == Op::Forward && ins.stage > 0 && s.rank_of_stage(ins.stage - 1) != r)
          ready = std::max(ready, ended.at({Op::Forward, ins.stage - 1, ins.microbatch}));
        if ((ins.op == Op::Backward || ins.op == Op::BackwardInput) && ins.stage + 1 < s.stages() &&
            s.rank_of_stage(ins.stage + 1) != r)
          ready = std::max(ready, ended.at({Op::Backward, ins.stage + 1, ins.microbatch}));
        EXPECT_NEAR(t.start, ready, kTol) << where << " rank " << r << ": " << describe(ins);
        previous_end = t.end;
        ++checked;
      }
    }
  });
  EXPECT_GT(checked, 10000);
}

// ZB-H1 with t_F = t_B = t_W (forward 1, backward 2 of which weight 1), p = 4, m = 8: each rank
// idles (p - 1)(t_F + t_B - t_W) = 3, a third of 1F1B's (p - 1)(t_F + t_B + t_W) = 9, at the same
// peak memory as 1F1B's first rank (p microbatches).
TEST(PipelineSimulator, ZeroBubbleH1HasAThirdOfTheOneFOneBBubble) {
  const Schedule zb = make_zero_bubble_h1(pipeline_layout(ScheduleKind::ZeroBubbleH1, 4, 8));
  const Schedule ofob = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 8));
  const SimulationResult z = run(zb, 1, 2, 1);
  const SimulationResult o = run(ofob, 1, 2, 1);
  EXPECT_NEAR(z.total_time, 27.0, kTol);
  EXPECT_NEAR(o.total_time, 33.0, kTol);
  EXPECT_NEAR(z.bubble_fraction, 3.0 / 27.0, kTol);  // 0.1111
  EXPECT_NEAR(o.bubble_fraction, 9.0 / 33.0, kTol);  // 0.2727
  EXPECT_NEAR((z.total_time - z.busy[0]) / (o.total_time - o.busy[0]), 1.0 / 3.0, kTol);
  EXPECT_LT(z.bubble_fraction, o.bubble_fraction);
  const double zb_peak = *std::max_element(z.peak_activation.begin(), z.peak_activation.end());
  const double ofob_peak = *std::max_element(o.peak_activation.begin(), o.peak_activation.end());
  EXPECT_NEAR(zb_peak, 4.0, kTol);
  EXPECT_NEAR(ofob_peak, 4.0, kTol);
}

// ZB-H1's idle time (p - 1)(t_F + t_B - t_W) per rank, for m >= p and t_W <= t_F, t_W <= t_B.
TEST(PipelineSimulator, ZeroBubbleH1MatchesItsClosedForm) {
  struct Costs {
    double forward, backward, weight;
  };
  for (const Costs c : {Costs{1, 2, 1}, Costs{1, 3, 1}, Costs{2, 3, 1}, Costs{1, 1, 0.5}})
    for (int p = 1; p <= 8; ++p)
      for (int m = p; m <= 16; ++m) {
        const Schedule s = make_zero_bubble_h1(pipeline_layout(ScheduleKind::ZeroBubbleH1, p, m));
        const SimulationResult r = run(s, c.forward, c.backward, c.weight);
        const double input = c.backward - c.weight;
        const double expected = m * (c.forward + c.backward) + (p - 1) * (c.forward + input - c.weight);
        ASSERT_NEAR(r.total_time, expected, kTol) << "p=" << p << " m=" << m << " costs " << c.forward << " "
                                                  << c.backward << " " << c.weight;
        EXPECT_NEAR(r.bubble_fraction, closed_form_bubble(s, c.forward, c.backward, c.weight)->fraction, kTol);
      }
}

// 2BW never flushes between batches: one fill and one drain for all steps * m microbatches.
TEST(PipelineSimulator, PipeDream2BWPaysOneFillForAllSteps) {
  for (int p = 1; p <= 6; ++p)
    for (int steps : {1, 2, 4}) {
      const int m = p + 1;
      const Schedule s = make_pipedream_2bw(pipeline_layout(ScheduleKind::PipeDream2BW, p, m), {.steps = steps});
      const SimulationResult r = run(s, 1, 2, 0);
      EXPECT_NEAR(r.total_time, (steps * m + p - 1) * 3.0, kTol) << "p=" << p << " steps=" << steps;
      EXPECT_NEAR(r.bubble_fraction, closed_form_bubble(s, 1, 2, 0)->fraction, kTol);
    }
}

// A transfer starts when both of its halves are posted (as NCCL's send/recv do) and takes c. One
// microbatch through GPipe crosses 2(p - 1) boundaries in a chain: p (t_f + t_b) + 2 (p - 1) c.
// With more microbatches part of the transfer time hides behind compute under isend/irecv: the
// total lies between the chain's share and the fully exposed (m + p - 1)(t_f + t_b + 2c). Blocking
// transfers also hold the rank, which does up to four of them per microbatch: at most
// (m + p - 1)(t_f + t_b + 4c), and never faster than isend/irecv.
TEST(PipelineSimulator, PointToPointCostLengthensTheCriticalPath) {
  const double c = 0.25;
  for (int p = 1; p <= 6; ++p) {
    const Schedule one = make_gpipe(pipeline_layout(ScheduleKind::GPipe, p, 1));
    EXPECT_NEAR(run(one, 1, 2, 0, TransferMode::Async, c).total_time, p * 3.0 + 2 * (p - 1) * c, kTol);
    EXPECT_NEAR(run(one, 1, 2, 0, TransferMode::Blocking, c).total_time, p * 3.0 + 2 * (p - 1) * c, kTol);
  }
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    const Schedule s = make_schedule(pipeline_layout(kind, 4, 8));
    const double async = run(s, 1, 2, 0, TransferMode::Async, c).total_time;
    const double blocking = run(s, 1, 2, 0, TransferMode::Blocking, c).total_time;
    EXPECT_GE(async, 33.0 + 2 * 3 * c - kTol) << schedule_name(kind);
    EXPECT_LE(async, 11 * (3.0 + 2 * c) + kTol) << schedule_name(kind);
    EXPECT_GE(blocking, async - kTol) << schedule_name(kind);
    EXPECT_LE(blocking, 11 * (3.0 + 4 * c) + kTol) << schedule_name(kind);
  }
}

TEST(PipelineSimulator, UnevenStagesFollowTheSlowestStage) {
  const Schedule gpipe = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 2, 1));
  PipelineCosts c = uniform_costs(gpipe, 1, 2, 0);
  c.forward = {1, 3};
  c.backward = {2, 5};
  EXPECT_NEAR(simulate_schedule(gpipe, c).total_time, 1 + 3 + 5 + 2, kTol);

  // 1F1B, p = 2, m = 4, stage 1 twice as slow: it runs 4 (2 + 4) back to back after rank 0's
  // first forward, and rank 0's last backward follows it: 1 + 24 + 2.
  const Schedule ofob = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 2, 4));
  PipelineCosts d = uniform_costs(ofob, 1, 2, 0);
  d.forward = {1, 2};
  d.backward = {2, 4};
  const SimulationResult r = simulate_schedule(ofob, d);
  EXPECT_NEAR(r.total_time, 27.0, kTol);
  EXPECT_NEAR(r.busy[1], 24.0, kTol);
}

TEST(PipelineSimulator, RecomputeTradesTimeForMemory) {
  const Schedule plain = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 1, 3));
  const Schedule recompute = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 1, 3), {.recompute = true});
  const SimulationResult a = run(plain, 1, 2, 0);
  PipelineCosts c = uniform_costs(recompute, 1, 2, 0);
  c.stashed_fraction = 0.25;
  const SimulationResult b = simulate_schedule(recompute, c);
  EXPECT_NEAR(a.total_time, 9.0, kTol);
  EXPECT_NEAR(b.total_time, 12.0, kTol);  // one more forward per microbatch
  EXPECT_NEAR(a.peak_activation[0], 3.0, kTol);
  // Two stashed inputs (0.25 each) plus one whole microbatch being computed.
  EXPECT_NEAR(b.peak_activation[0], 1.5, kTol);
}

TEST(PipelineSimulator, BadCostsAndStuckSchedulesAreRefused) {
  const Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 2, 2));
  PipelineCosts c = uniform_costs(s, 1, 2, 0);
  c.forward.pop_back();
  EXPECT_THROW(simulate_schedule(s, c), Error);
  c = uniform_costs(s, 1, 2, 3);
  try {
    simulate_schedule(s, c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the whole backward time"), std::string::npos);
  }
  c = uniform_costs(s, 1, 2, 0, -1.0);
  EXPECT_THROW(simulate_schedule(s, c), Error);

  Schedule stuck = s;
  std::erase_if(stuck.programs[0], [](const Instruction& i) { return i.op == Op::Send; });
  try {
    simulate_schedule(stuck, uniform_costs(stuck, 1, 2, 0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot simulate an invalid 1f1b schedule"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0 send(s) and 1 recv(s)"), std::string::npos) << e.what();
  }
}

TEST(PipelineSimulator, ReportPutsTheClosedFormNextToTheSimulatedBubble) {
  const Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 8));
  const SimulationResult r = run(s, 1, 2, 0);
  const std::string text = simulation_report(s, validate(s), r, closed_form_bubble(s, 1, 2, 0));
  EXPECT_NE(text.find("0.2727 simulated, 0.2727 closed form (p-1)/(m+p-1)"), std::string::npos) << text;
  EXPECT_NE(text.find("total time   33"), std::string::npos) << text;
  EXPECT_NE(simulation_caption(r, std::nullopt).find("bubble 27.27 %, total time 33, peak activations 4 microbatches"),
            std::string::npos);
}
