// Generators: the instruction lists have the shape each paper describes, carry what an executor
// needs, and bad shapes are refused with a message that says what to do.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "schedule/generators.h"
#include "schedule/validator.h"
#include "pipeline_test_util.h"

using namespace tessera;
using namespace tessera::pipeline;
using tessera::pipeline::test_util::pipeline_layout;

namespace {

std::string error_of(ScheduleKind kind, int p, int m, int v = 1, GeneratorOptions options = {}) {
  try {
    make_schedule(pipeline_layout(kind, p, m, v), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The compute instructions of one rank as short tokens: "F0", "B3", "b2", "W1", "R0", "O".
std::vector<std::string> compute_tokens(const Schedule& s, int rank) {
  std::vector<std::string> out;
  for (const Instruction& ins : s.programs[rank]) {
    switch (ins.op) {
      case Op::Forward: out.push_back(fmt::format("F{}", ins.microbatch)); break;
      case Op::Backward: out.push_back(fmt::format("B{}", ins.microbatch)); break;
      case Op::BackwardInput: out.push_back(fmt::format("b{}", ins.microbatch)); break;
      case Op::BackwardWeight: out.push_back(fmt::format("W{}", ins.microbatch)); break;
      case Op::Recompute: out.push_back(fmt::format("R{}", ins.microbatch)); break;
      case Op::OptimizerStep: out.push_back("O"); break;
      default: break;
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t space = text.find(' ', at);
    out.push_back(text.substr(at, space - at));
    if (space == std::string::npos) break;
    at = space + 1;
  }
  return out;
}

}  // namespace

TEST(PipelineGenerators, RefuseBadShapesWithTheFix) {
  EXPECT_NE(error_of(ScheduleKind::OneFOneB, 0, 8).find("at least one stage (got p = 0)"), std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::GPipe, 4, 0).find("at least one microbatch (got m = 0)"), std::string::npos);
  const std::string interleaved = error_of(ScheduleKind::Interleaved, 4, 6, 2);
  EXPECT_NE(interleaved.find("multiple of the number of stages (m = 6 is not a multiple of p = 4)"), std::string::npos)
      << interleaved;
  EXPECT_NE(interleaved.find("use m = 4 or m = 8"), std::string::npos) << interleaved;
  EXPECT_NE(error_of(ScheduleKind::Interleaved, 4, 3, 2).find("use m = 4"), std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::GPipe, 4, 8, 2).find("use the interleaved schedule for v > 1"), std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::PipeDream2BW, 4, 3).find("use m >= 4"), std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::OneFOneB, 4, 8, 1, {.steps = 3}).find("only 2bw runs several steps"),
            std::string::npos);
  EXPECT_NE(error_of(ScheduleKind::OneFOneB, -1, 8).find("p = -1"), std::string::npos);
  try {
    parse_schedule_kind("1f1b-interleaved");
    FAIL() << "unknown name accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose one of gpipe, 1f1b, interleaved, 2bw, zb-h1"), std::string::npos);
  }
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                         ScheduleKind::PipeDream2BW, ScheduleKind::ZeroBubbleH1})
    EXPECT_EQ(parse_schedule_kind(schedule_name(k)), k);
}

TEST(PipelineGenerators, MicrobatchesComeFromTheLayoutsBatch) {
  // m = B / (dp x b): dp and the microbatch size change how many microbatches a pipeline runs, not
  // the order it runs them in.
  config::ParallelLayout layout = pipeline_layout(ScheduleKind::OneFOneB, 4, 8);
  layout.dp = 2;
  layout.micro_batch = 2;
  layout.global_batch = 32;
  EXPECT_EQ(make_schedule(layout).microbatches, 8);
  EXPECT_EQ(make_schedule(layout).programs, make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 8)).programs);
  layout.global_batch = 30;
  std::string e;
  try {
    make_schedule(layout);
  } catch (const Error& error) {
    e = error.what();
  }
  EXPECT_NE(e.find("the global batch 30 is not a multiple of dp 2 × micro batch 2 = 4"), std::string::npos) << e;
}

TEST(PipelineGenerators, GPipeRunsAllForwardsThenAllBackwards) {
  const Schedule s = make_gpipe(pipeline_layout(ScheduleKind::GPipe, 3, 4));
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(compute_tokens(s, r), split("F0 F1 F2 F3 B3 B2 B1 B0 O")) << "rank " << r;
}

TEST(PipelineGenerators, OneFOneBWarmsUpThenAlternates) {
  const Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 6));
  EXPECT_EQ(compute_tokens(s, 0), split("F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 O"));
  EXPECT_EQ(compute_tokens(s, 2), split("F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 O"));
  EXPECT_EQ(compute_tokens(s, 3), split("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 O"));
  // Fewer microbatches than stages: the warm-up is cut short and nothing is invented.
  const Schedule few = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 2));
  EXPECT_EQ(compute_tokens(few, 0), split("F0 F1 B0 B1 O"));
}

TEST(PipelineGenerators, TransfersNameTheirPeerTensorAndMicrobatch) {
  const Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 3));
  for (int r = 0; r < 4; ++r)
    for (const Instruction& ins : s.programs[r]) {
      if (!is_transfer(ins.op)) continue;
      const bool towards_next = (ins.op == Op::Send) == (ins.tensor == Tensor::Activation);
      EXPECT_EQ(ins.peer, towards_next ? r + 1 : r - 1) << describe(ins);
      EXPECT_GE(ins.microbatch, 0);
      EXPECT_EQ(ins.stage, r) << "stage of a transfer is the local stage";
    }
  // Rank 1 receives each microbatch's activation before its forward, and sends it on after.
  const auto& rank1 = s.programs[1];
  const auto position = [&](Op op, Tensor t, int mb) {
    return std::find_if(rank1.begin(), rank1.end(),
                        [&](const Instruction& i) { return i.op == op && i.tensor == t && i.microbatch == mb; }) -
           rank1.begin();
  };
  for (int mb = 0; mb < 3; ++mb) {
    EXPECT_LT(position(Op::Recv, Tensor::Activation, mb), position(Op::Forward, Tensor::None, mb));
    EXPECT_GT(position(Op::Send, Tensor::Activation, mb), position(Op::Forward, Tensor::None, mb));
    EXPECT_EQ(describe(rank1[position(Op::Send, Tensor::Activation, mb)]),
              "send activation of microbatch " + std::to_string(mb) + " (stage 1 -> 2) to rank 2");
  }
}

TEST(PipelineGenerators, InterleavedPlacesNonConsecutiveChunks) {
  const Schedule s = make_interleaved(pipeline_layout(ScheduleKind::Interleaved, 2, 4, 2));
  EXPECT_EQ(s.stages(), 4);
  // Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
  for (int r = 0; r < 2; ++r)
    for (const Instruction& ins : s.programs[r]) {
      EXPECT_EQ(ins.stage % 2, r) << describe(ins);
      EXPECT_EQ(ins.chunk, ins.stage / 2) << describe(ins);
    }
  // Megatron's order: microbatches in groups of p, chunk by chunk; rank 0 warms up with
  // (p - r - 1) * 2 + (v - 1) * p = 4 forwards, then alternates.
  std::vector<std::string> order;
  for (const Instruction& ins : s.programs[0])
    if (ins.op == Op::Forward || ins.op == Op::Backward)
      order.push_back(fmt::format("{}{}c{}", ins.op == Op::Forward ? "F" : "B", ins.microbatch, ins.chunk));
  EXPECT_EQ(order, split("F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0"));
  // v = 1 is plain 1F1B.
  EXPECT_EQ(compute_tokens(make_interleaved(pipeline_layout(ScheduleKind::Interleaved, 4, 6)), 1),
            compute_tokens(make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 4, 6)), 1));
}

TEST(PipelineGenerators, ZeroBubbleSplitsBackwardAndDelaysWeightGradients) {
  const Schedule s = make_zero_bubble_h1(pipeline_layout(ScheduleKind::ZeroBubbleH1, 4, 6));
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(compute_tokens(s, 0), split("F0 F1 F2 F3 b0 W0 F4 b1 W1 F5 b2 W2 b3 W3 b4 W4 b5 W5 O"));
  EXPECT_EQ(compute_tokens(s, 3), split("F0 b0 F1 b1 F2 b2 F3 b3 W0 F4 b4 W1 F5 b5 W2 W3 W4 W5 O"));
  for (int r = 0; r < 4; ++r)
    for (const Instruction& ins : s.programs[r]) EXPECT_NE(ins.op, Op::Backward);
}

// Under the default (TwoBWVersions::Newest) microbatch j of batch b >= 1 reads version b - 1 on
// rank r only when j <= p - 2 - r (its forward there precedes the step for batch b - 1), else b;
// under ::Delayed all of batch b reads b - 1. Either way the version exists when it is read.
TEST(PipelineGenerators, PipeDream2BWWritesTheWeightVersionOnEveryInstruction) {
  const int p = 3, m = 4, steps = 3;
  for (const TwoBWVersions rule : {TwoBWVersions::Newest, TwoBWVersions::Delayed}) {
    const Schedule s = make_pipedream_2bw(pipeline_layout(ScheduleKind::PipeDream2BW, p, m),
                                          {.steps = steps, .two_bw_versions = rule});
    EXPECT_FALSE(s.flush);
    int stale = 0;
    for (int r = 0; r < p; ++r) {
      int steps_seen = 0;
      for (const Instruction& ins : s.programs[r]) {
        if (ins.op == Op::OptimizerStep) {
          EXPECT_EQ(ins.weight_version, ++steps_seen);
        } else if (is_compute(ins.op)) {
          const int batch = ins.microbatch / m, j = ins.microbatch % m;
          const bool older = rule == TwoBWVersions::Delayed || j <= p - 2 - r;
          EXPECT_EQ(ins.weight_version, older ? std::max(0, batch - 1) : batch) << describe(ins);
          // The version it reads exists: produced by an earlier optimizer step on this rank.
          EXPECT_LE(ins.weight_version, steps_seen) << describe(ins);
          if (ins.op == Op::Forward && batch >= 1 && ins.weight_version < batch) ++stale;
        }
      }
      EXPECT_EQ(steps_seen, steps);
    }
    // Newest: batches 1 and 2 each start 2 + 1 + 0 microbatches early over the three ranks.
    EXPECT_EQ(stale, rule == TwoBWVersions::Newest ? 2 * 3 : 2 * m * p);
    const ValidationReport report = validate(s);
    ASSERT_TRUE(report.ok()) << report.summary();
  }
  const Schedule s = make_pipedream_2bw(pipeline_layout(ScheduleKind::PipeDream2BW, p, m), {.steps = steps});
  // Batches follow each other without a flush: rank 0 starts batch 1 before finishing batch 0.
  const auto tokens = compute_tokens(s, 0);
  const auto first_of_batch1 = std::find(tokens.begin(), tokens.end(), "F4");
  const auto last_of_batch0 = std::find(tokens.begin(), tokens.end(), "B3");
  EXPECT_LT(first_of_batch1, last_of_batch0);
  const ValidationReport report = validate(s);
  ASSERT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(*std::max_element(report.peak_weight_versions.begin(), report.peak_weight_versions.end()), 2);
}

TEST(PipelineGenerators, RecomputePrecedesEveryBackward) {
  const Schedule s = make_one_f_one_b(pipeline_layout(ScheduleKind::OneFOneB, 3, 4), {.recompute = true});
  for (int r = 0; r < 3; ++r) {
    const auto& program = s.programs[r];
    int recomputes = 0;
    for (std::size_t k = 0; k < program.size(); ++k) {
      if (program[k].op != Op::Backward) continue;
      // The recompute is the last compute before this backward (transfers may sit between).
      std::size_t j = k;
      while (j > 0 && is_transfer(program[j - 1].op)) --j;
      ASSERT_GT(j, 0u);
      EXPECT_EQ(program[j - 1].op, Op::Recompute);
      EXPECT_EQ(program[j - 1].microbatch, program[k].microbatch);
      ++recomputes;
    }
    EXPECT_EQ(recomputes, 4);
  }
  EXPECT_TRUE(validate(s).ok()) << validate(s).summary();
}

TEST(PipelineGenerators, SameInputSameLists) {
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                         ScheduleKind::PipeDream2BW, ScheduleKind::ZeroBubbleH1}) {
    const config::ParallelLayout layout = pipeline_layout(k, 4, 8, k == ScheduleKind::Interleaved ? 2 : 1);
    const GeneratorOptions options{.steps = k == ScheduleKind::PipeDream2BW ? 2 : 1};
    EXPECT_EQ(make_schedule(layout, options).programs, make_schedule(layout, options).programs) << schedule_name(k);
  }
}

// A Send comes right after the compute that made its tensor (only other transfers between), so an
// executor that posts sends without waiting hands each tensor over as soon as it exists. Every
// generator, with and without recompute.
TEST(PipelineGenerators, EverySendDirectlyFollowsTheComputeThatMadeItsTensor) {
  int sends = 0;
  const auto one_to_twelve = [](int) {
    std::vector<int> m(12);
    for (int i = 0; i < 12; ++i) m[static_cast<size_t>(i)] = i + 1;
    return m;
  };
  test_util::for_each_schedule(2, 6, 3, one_to_twelve, [&](const Schedule& s, const std::string& where) {
    for (int r = 0; r < s.ranks; ++r) {
      const auto& program = s.programs[r];
      for (std::size_t i = 0; i < program.size(); ++i) {
        const Instruction& send = program[i];
        if (send.op != Op::Send) continue;
        std::size_t j = i;
        while (j > 0 && is_transfer(program[j - 1].op)) --j;
        ASSERT_GT(j, 0u) << where << ": " << describe(send) << " opens rank " << r << "'s list";
        const Instruction& made = program[j - 1];
        const bool producer = send.tensor == Tensor::Activation
                                  ? made.op == Op::Forward
                                  : made.op == Op::Backward || made.op == Op::BackwardInput;
        EXPECT_TRUE(producer && made.stage == send.stage && made.microbatch == send.microbatch)
            << where << " rank " << r << ": " << describe(send) << " comes after " << describe(made);
        ++sends;
      }
    }
  });
  EXPECT_GT(sends, 10000);
}
