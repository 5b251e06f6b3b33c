// The validator accepts every generated schedule over a sweep of shapes, and catches broken ones:
// a deadlock from a swapped send order, unmatched transfers, data used before it exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/check.h"
#include "schedule/generators.h"
#include "schedule/validator.h"
#include "pipeline_test_util.h"

using namespace tessera;
using namespace tessera::pipeline;
using tessera::pipeline::test_util::pipeline_layout;

namespace {

bool mentions(const ValidationReport& r, const std::string& text) {
  return std::any_of(r.problems.begin(), r.problems.end(),
                     [&](const std::string& p) { return p.find(text) != std::string::npos; });
}

std::size_t find(const std::vector<Instruction>& program, Op op, Tensor tensor, int mb) {
  for (std::size_t k = 0; k < program.size(); ++k)
    if (program[k].op == op && program[k].tensor == tensor && program[k].microbatch == mb) return k;
  ADD_FAILURE() << "instruction not found";
  return 0;
}

}  // namespace

// p = 1..8, m = 1..16, v = 1..4 wherever the generator accepts the shape (2BW with 3 steps).
// Each kind must accept some shapes, every accepted schedule must validate, and the peak of live
// microbatches must match each schedule's memory claim.
TEST(PipelineValidator, EveryGeneratedScheduleIsValid) {
  const auto t0 = std::chrono::steady_clock::now();
  int checked = 0;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::PipeDream2BW, ScheduleKind::ZeroBubbleH1}) {
    int accepted = 0;
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m)
        for (int v = 1; v <= 4; ++v) {
          const GeneratorOptions options{.steps = kind == ScheduleKind::PipeDream2BW ? 3 : 1};
          Schedule s;
          try {
            s = make_schedule(pipeline_layout(kind, p, m, v), options);
          } catch (const Error&) {
            continue;  // refusals are tested in test_generators
          }
          ++accepted;
          const ValidationReport r = validate(s);
          ASSERT_TRUE(r.ok()) << schedule_name(kind) << " p=" << p << " m=" << m << " v=" << v << "\n" << r.summary();
          // Every microbatch crosses every rank boundary twice (activation and gradient).
          const int boundaries = p > 1 ? p * v - 1 : 0;
          EXPECT_EQ(r.transfers, 2 * boundaries * s.total_microbatches());
          const int peak = *std::max_element(r.peak_alive_per_rank.begin(), r.peak_alive_per_rank.end());
          switch (kind) {
            case ScheduleKind::GPipe:
              for (int st = 0; st < p; ++st) EXPECT_EQ(r.peak_alive_per_stage[st], m);
              break;
            case ScheduleKind::OneFOneB:
            case ScheduleKind::PipeDream2BW:
              for (int rank = 0; rank < p; ++rank) EXPECT_EQ(r.peak_alive_per_rank[rank], std::min(p - rank, m));
              break;
            case ScheduleKind::ZeroBubbleH1: EXPECT_EQ(peak, std::min(p, m)); break;
            case ScheduleKind::Interleaved:
              // Megatron's warm-up: 2(p - r - 1) + (v - 1)p + 1 chunk-microbatches on rank r.
              if (v > 1 && m > p) {
                for (int rank = 0; rank < p; ++rank)
                  EXPECT_EQ(r.peak_alive_per_rank[rank], std::min(2 * (p - rank - 1) + (v - 1) * p + 1, v * m));
              }
              break;
          }
          if (kind == ScheduleKind::PipeDream2BW) {
            // One stage reads only the newest weights; with more, the first starts a batch early.
            EXPECT_EQ(*std::max_element(r.peak_weight_versions.begin(), r.peak_weight_versions.end()),
                      p > 1 ? 2 : 1);
          }
          ++checked;
        }
    EXPECT_GT(accepted, 0) << schedule_name(kind);
  }
  // GPipe, 1F1B, ZB-H1: all 128 (p, m); 2BW: m >= p; interleaved: v = 1 always, v > 1 when p divides m.
  int expected = 3 * 128;
  for (int p = 1; p <= 8; ++p) expected += (16 - p + 1) + 16 + 3 * (16 / p);
  EXPECT_EQ(checked, expected);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0) << "the sweep must stay fast";
}

TEST(PipelineValidator, SwappedSendOrderDeadlocksAndNamesTheRanks) {
  // GPipe, p = 2, m = 2. Rank 0 runs both forwards, then sends microbatch 1 before microbatch 0,
  // while rank 1 receives microbatch 0 first. Data order stays correct; only the send order is
  // swapped, which blocking send/recv cannot survive.
  Schedule s = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 2, 2));
  auto& rank0 = s.programs[0];
  const Instruction send0 = rank0[find(rank0, Op::Send, Tensor::Activation, 0)];
  const Instruction send1 = rank0[find(rank0, Op::Send, Tensor::Activation, 1)];
  std::erase_if(rank0, [](const Instruction& i) { return i.op == Op::Send; });
  const std::size_t after_forwards = find(rank0, Op::Forward, Tensor::None, 1) + 1;
  rank0.insert(rank0.begin() + static_cast<std::ptrdiff_t>(after_forwards), {send1, send0});

  const ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.problems.size(), 1u) << r.summary();  // only the deadlock: sends and recvs all match
  const std::string& text = r.problems[0];
  EXPECT_NE(text.find("deadlock"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 #2 (send activation of microbatch 1 (stage 0 -> 1) to rank 1) blocks"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1 #0 (recv activation of microbatch 0 (stage 0 -> 1) from rank 0) blocks"),
            std::string::npos)
      << text;
  try {
    check_valid(s);
    FAIL() << "check_valid accepted a deadlocking schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos);
  }
}

TEST(PipelineValidator, HeadToHeadSendsDeadlockUnderBlockingSemantics) {
  // Both neighbours send first: rank 0 its activation, rank 1 the gradient of an earlier
  // microbatch. Fine with buffered sends, a deadlock with blocking ones: the validator assumes the
  // strictest executor.
  Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 2, 3));
  auto& rank1 = s.programs[1];
  const std::size_t recv = find(rank1, Op::Recv, Tensor::Activation, 1);
  const std::size_t send = find(rank1, Op::Send, Tensor::Gradient, 0);
  ASSERT_LT(recv, send);
  const Instruction moved = rank1[recv];
  rank1.erase(rank1.begin() + static_cast<std::ptrdiff_t>(recv));
  rank1.insert(rank1.begin() + static_cast<std::ptrdiff_t>(send), moved);  // now just after the send
  const ValidationReport r = validate(s);
  EXPECT_TRUE(mentions(r, "deadlock")) << r.summary();
}

TEST(PipelineValidator, UnmatchedTransfersAreReported) {
  Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 3, 2));
  auto& rank2 = s.programs[2];
  rank2.erase(rank2.begin() + static_cast<std::ptrdiff_t>(find(rank2, Op::Recv, Tensor::Activation, 1)));
  const ValidationReport r = validate(s);
  EXPECT_TRUE(mentions(r, "1 send(s) and 0 recv(s)")) << r.summary();
  EXPECT_TRUE(mentions(r, "runs before its input activation was received")) << r.summary();
  EXPECT_TRUE(mentions(r, "microbatch 1 never receives its activation on stage 2")) << r.summary();
}

TEST(PipelineValidator, BackwardBeforeForwardIsCaught) {
  Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 1, 2));
  auto& program = s.programs[0];
  std::swap(program[find(program, Op::Forward, Tensor::None, 1)], program[find(program, Op::Backward, Tensor::None, 1)]);
  const ValidationReport r = validate(s);
  EXPECT_TRUE(mentions(r, "rank 0 #2 (backward stage 0 microbatch 1): runs before its forward")) << r.summary();
}

TEST(PipelineValidator, DuplicateAndMissingWorkIsCaught) {
  Schedule s = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 2, 2));
  auto& rank1 = s.programs[1];
  const std::size_t b = find(rank1, Op::Backward, Tensor::None, 0);
  rank1.insert(rank1.begin() + static_cast<std::ptrdiff_t>(b), rank1[b]);
  EXPECT_TRUE(mentions(validate(s), "backward a second time"));

  Schedule missing = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 2, 2));
  auto& r0 = missing.programs[0];
  r0.erase(r0.begin() + static_cast<std::ptrdiff_t>(find(r0, Op::Backward, Tensor::None, 1)));
  const ValidationReport r = validate(missing);
  EXPECT_TRUE(mentions(r, "microbatch 1 never runs backward on stage 0 (rank 0)")) << r.summary();
  EXPECT_TRUE(mentions(r, "runs before the backward of microbatch 1 finished")) << r.summary();
}

TEST(PipelineValidator, MalformedInstructionsAreNamed) {
  Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 3, 2));
  s.programs[1][find(s.programs[1], Op::Send, Tensor::Activation, 0)].peer = 0;
  EXPECT_TRUE(mentions(validate(s), "stage 2 lives on rank 2")) << validate(s).summary();

  Schedule t = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 3, 2));
  t.programs[0][0].stage = 1;
  EXPECT_TRUE(mentions(validate(t), "stage 1 lives on rank 1, not here"));
}

TEST(PipelineValidator, OptimizerStepMustWaitForTheFlush) {
  Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 2, 3));
  auto& rank0 = s.programs[0];
  Instruction step = rank0.back();
  ASSERT_EQ(step.op, Op::OptimizerStep);
  rank0.pop_back();
  rank0.insert(rank0.end() - 2, step);
  const ValidationReport r = validate(s);
  EXPECT_TRUE(mentions(r, "runs before the backward of microbatch 2 finished on this stage")) << r.summary();
}

TEST(PipelineValidator, WeightVersionsMustExistAndMatch) {
  Schedule s = make_pipedream_2bw(pipeline_layout(ScheduleKind::PipeDream2BW, 2, 2), {.steps = 3});
  for (Instruction& ins : s.programs[0])
    if (ins.op == Op::Forward && ins.microbatch == 4) ins.weight_version = 2;  // not produced yet
  ValidationReport r = validate(s);
  EXPECT_TRUE(mentions(r, "reads weights v2 before they exist")) << r.summary();
  EXPECT_TRUE(mentions(r, "reads weights v1 but its forward read v2")) << r.summary();
}
