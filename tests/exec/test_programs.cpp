// Programs and their events: the lowering of one-stage schedules with each recompute policy, the
// order in which transforms hear about each action (by slot), and the events of every phase.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/interpreter.h"
#include "exec/program.h"
#include "exec/program_memory.h"
#include "exec/recompute.h"
#include "exec/transform.h"
#include "plan/memory_model.h"
#include "plan/recompute_model.h"
#include "nn/gpt.h"
#include "parallel/expert_parallel.h"
#include "schedule/generators.h"
#include "parallel/tensor_parallel.h"
#include "plan/model_costs.h"
#include "parity_harness.h"

using namespace tessera;
using exec::Phase;

namespace {

config::ParallelLayout one_rank(config::ScheduleKind kind, int microbatches, int virtual_stages = 1) {
  config::ParallelLayout l;
  l.schedule = kind;
  l.virtual_stages = virtual_stages;
  l.global_batch = microbatches;
  return l;
}

// "F1" forward of unit 1, "R2" recompute, "B" backward, "I" input half, "W" weight half, "E"
// eval, each with "/m<microbatch>"; "step" the optimizer step.
std::string code(const exec::Action& a) {
  if (a.kind == exec::Action::Kind::OptimizerStep) return "step";
  if (exec::is_transfer(a)) {
    // "sA3/m0>1": send the activation into unit 3's slot, microbatch 0, to rank 1; "rG3/m0<1" receive a gradient.
    const bool send = a.kind == exec::Action::Kind::Send;
    return fmt::format("{}{}{}/m{}{}{}", send ? "s" : "r", a.payload == pipeline::Tensor::Activation ? "A" : "G", a.unit,
                       a.microbatch, send ? ">" : "<", a.peer);
  }
  const char* letter = "?";
  switch (a.phase) {
    case Phase::Forward: letter = "F"; break;
    case Phase::Recompute: letter = "R"; break;
    case Phase::Backward: letter = "B"; break;
    case Phase::BackwardInput: letter = "I"; break;
    case Phase::BackwardWeight: letter = "W"; break;
    case Phase::Eval: letter = "E"; break;
  }
  return fmt::format("{}{}/m{}", letter, a.unit, a.microbatch);
}

std::vector<std::string> codes(const exec::Program& p) {
  std::vector<std::string> out;
  for (const exec::Action& a : p.actions) out.push_back(code(a));
  return out;
}

// A model of 3 blocks: units 0 (embedding), 1..3 (blocks), 4 (head).
constexpr int kUnits = 5;

exec::StagePlan plan_with(config::RecomputePolicy policy, int every_k = 0) {
  exec::StagePlan plan = exec::even_stages(kUnits, 1);
  exec::StagePlan::Stage& s = plan.stages.front();
  const int chain = s.last - s.chain_first();
  s.recompute = policy == config::RecomputePolicy::Full    ? memory::full_schedule(chain)
                : policy == config::RecomputePolicy::EveryK ? memory::every_k_schedule(chain, every_k)
                                                            : memory::none_schedule(chain);
  s.selective = policy == config::RecomputePolicy::Selective;
  return plan;
}

exec::Program lower(config::ScheduleKind kind, int microbatches, const exec::StagePlan& plan) {
  return exec::lower_training(pipeline::make_schedule(one_rank(kind, microbatches)), 0, plan);
}

}  // namespace

TEST(Programs, OneFOneBWithoutRecomputeIsTheStraightChainPerMicrobatch) {
  const exec::Program p = lower(config::ScheduleKind::OneFOneB, 2, plan_with(config::RecomputePolicy::None));
  EXPECT_EQ(codes(p), (std::vector<std::string>{"F0/m0", "F1/m0", "F2/m0", "F3/m0", "F4/m0", "B4/m0", "B3/m0",
                                                "B2/m0", "B1/m0", "B0/m0", "F0/m1", "F1/m1", "F2/m1", "F3/m1",
                                                "F4/m1", "B4/m1", "B3/m1", "B2/m1", "B1/m1", "B0/m1", "step"}));
  for (const exec::Action& a : p.actions) {
    if (a.kind == exec::Action::Kind::Unit && a.phase == Phase::Forward) {
      EXPECT_EQ(a.keep, memory::Keep::All);
    }
  }
}

TEST(Programs, FullRecomputeKeepsInputsAndRecomputesEachBlockBeforeItsBackward) {
  const exec::Program p = lower(config::ScheduleKind::OneFOneB, 1, plan_with(config::RecomputePolicy::Full));
  EXPECT_EQ(codes(p), (std::vector<std::string>{"F0/m0", "F1/m0", "F2/m0", "F3/m0", "F4/m0", "B4/m0", "R3/m0",
                                                "B3/m0", "R2/m0", "B2/m0", "R1/m0", "B1/m0", "B0/m0", "step"}));
  EXPECT_EQ(p.actions[1].keep, memory::Keep::Input);
  EXPECT_EQ(p.actions[4].keep, memory::Keep::All) << "the head keeps everything: its backward follows at once";
  EXPECT_EQ(p.actions[6].keep, memory::Keep::All) << "a recomputation keeps what the backward needs";
}

TEST(Programs, EveryKRecomputesSegmentsAndSelectiveMarksBlocksOnly) {
  const exec::Program k2 = lower(config::ScheduleKind::OneFOneB, 1, plan_with(config::RecomputePolicy::EveryK, 2));
  EXPECT_EQ(codes(k2), (std::vector<std::string>{"F0/m0", "F1/m0", "F2/m0", "F3/m0", "F4/m0", "B4/m0", "R3/m0",
                                                 "B3/m0", "R1/m0", "R2/m0", "B2/m0", "B1/m0", "B0/m0", "step"}));
  const exec::Program sel = lower(config::ScheduleKind::OneFOneB, 1, plan_with(config::RecomputePolicy::Selective));
  for (const exec::Action& a : sel.actions) {
    if (a.kind != exec::Action::Kind::Unit || a.phase != Phase::Forward) continue;
    EXPECT_EQ(a.selective, a.unit >= 1 && a.unit <= 3) << exec::describe(a);
  }
}

TEST(Programs, SplitBackwardAndGPipeAndEvaluation) {
  const exec::Program zb = lower(config::ScheduleKind::ZeroBubbleH1, 1, plan_with(config::RecomputePolicy::None));
  EXPECT_EQ(codes(zb), (std::vector<std::string>{"F0/m0", "F1/m0", "F2/m0", "F3/m0", "F4/m0", "I4/m0", "I3/m0",
                                                 "I2/m0", "I1/m0", "I0/m0", "W4/m0", "W3/m0", "W2/m0", "W1/m0",
                                                 "W0/m0", "step"}));
  const exec::Program gpipe = lower(config::ScheduleKind::GPipe, 2, plan_with(config::RecomputePolicy::None));
  ASSERT_EQ(gpipe.actions.size(), 21u);
  EXPECT_EQ(code(gpipe.actions[5]), "F0/m1") << "GPipe runs every forward first";
  EXPECT_EQ(code(gpipe.actions[10]), "B4/m1") << "and then the backwards, last microbatch first";
  EXPECT_EQ(codes(exec::lower_evaluation(exec::even_stages(kUnits, 1), 0, 1)), (std::vector<std::string>{"E0/m0", "E1/m0", "E2/m0", "E3/m0", "E4/m0"}));
}

TEST(Programs, StagesSplitBlocksEvenlyWithTheEndsOnTheOuterStages) {
  const exec::StagePlan plan = exec::even_stages(2 + 5, 2);  // 5 blocks over 2 stages
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[0].first, 0);
  EXPECT_EQ(plan.stages[0].last, 4) << "embedding and blocks 1..3";
  EXPECT_EQ(plan.stages[1].first, 4);
  EXPECT_EQ(plan.stages[1].last, 7) << "blocks 4..5 and the head";
  EXPECT_THROW(exec::even_stages(2 + 1, 2), Error) << "one block cannot make two stages";
}

namespace {

// Logs every hook call of the transform it stands for, into a log shared by several of them.
class Logger final : public exec::Transform {
 public:
  Logger(std::string name, std::vector<std::string>& log) : name_(std::move(name)), log_(log) {}
  std::string_view name() const override { return name_; }
  void begin(const exec::Program&) override { log_.push_back(name_ + " begin"); }
  void before(const exec::Event& e) override { log_.push_back(name_ + " before " + code(e.action())); }
  void after(const exec::Event& e) override { log_.push_back(name_ + " after " + code(e.action())); }
  void finish(const exec::Program&) override { log_.push_back(name_ + " finish"); }

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

}  // namespace

// Before an action the transforms run outermost first, after it innermost first; the event carries
// the action's unit, microbatch and phase, for every phase the interpreter runs.
TEST(Interpreter, TellsTheChainAboutEveryActionInSlotOrder) {
  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  c.n_layer = 1;
  MemoryAccountant memory;
  nn::GPT model(c, memory, 3);
  exec::ParameterOwnership ownership(model.parameters());
  exec::TransformChain chain;
  std::vector<std::string> log;
  Logger observer("observer", log), reducer("reduction", log);
  chain.add(exec::TransformSlot::GradientReduction, reducer);
  chain.add(exec::TransformSlot::Observer, observer);
  EXPECT_THROW(chain.add(exec::TransformSlot::Observer, reducer), Error) << "one transform per slot";
  exec::Interpreter interpreter(model, ownership, chain, memory);

  std::vector<int32_t> tokens(2 * 16, 1), targets(2 * 16, 2);
  const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 2, 16), nn::token_tensor(targets.data(), 2, 16), 1.0f},
                                 0};
  exec::StagePlan plan = exec::even_stages(model.num_units(), 1);
  plan.stages[0].recompute = memory::full_schedule(2);
  const exec::Program full = exec::lower_training(
      pipeline::make_schedule(one_rank(config::ScheduleKind::ZeroBubbleH1, 1)), 0, plan);
  bool stepped = false;
  interpreter.run(full, std::span(&mb, 1), {}, [&](int) {
    log.push_back("optimizer step");
    stepped = true;
  });
  EXPECT_TRUE(stepped);
  // F0 F1 F2 I2 R1 I1 I0 W2 W1 W0 step: every phase of training, each wrapped in slot order.
  std::vector<std::string> want = {"observer begin", "reduction begin"};
  for (const char* a : {"F0/m0", "F1/m0", "F2/m0", "I2/m0", "R1/m0", "I1/m0", "I0/m0", "W2/m0", "W1/m0", "W0/m0"}) {
    want.push_back(std::string("observer before ") + a);
    want.push_back(std::string("reduction before ") + a);
    want.push_back(std::string("reduction after ") + a);
    want.push_back(std::string("observer after ") + a);
  }
  want.insert(want.end(), {"reduction finish", "observer finish", "optimizer step"});
  EXPECT_EQ(log, want);

  log.clear();
  const exec::ProgramResult eval = interpreter.run(exec::lower_evaluation(exec::even_stages(model.num_units(), 1), 0, 1), std::span(&mb, 1), {});
  EXPECT_EQ(log.size(), 2u + 4u * 3u + 2u);
  EXPECT_EQ(log[2], "observer before E0/m0");
  EXPECT_EQ(eval.counted, 32);
  EXPECT_GT(eval.loss_sum, 0.0);
  EXPECT_EQ(memory.stats().live_of(MemoryTag::Activations), 0u) << "an evaluation keeps nothing";
}

// Interleaved chunks on one pipeline rank (pp = 1, v = 2): the evaluation hands each chunk's output
// to the next on the same rank, as a training program does, and equals the one-stage evaluation.
TEST(Interpreter, AnEvaluationOfChunksOnOneRankSendsNothingAndEqualsOneStage) {
  const exec::StagePlan chunks = exec::even_stages(kUnits, 2);
  EXPECT_EQ(codes(exec::lower_evaluation(chunks, 0, 1)),
            (std::vector<std::string>{"E0/m0", "E1/m0", "E2/m0", "E3/m0", "E4/m0"}));

  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  c.n_layer = 2;
  MemoryAccountant memory;
  nn::GPT model(c, memory, 3);
  exec::ParameterOwnership ownership(model.parameters());
  exec::TransformChain chain;
  exec::Interpreter interpreter(model, ownership, chain, memory);
  std::vector<int32_t> tokens(2 * 16, 1), targets(2 * 16, 2);
  const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 2, 16), nn::token_tensor(targets.data(), 2, 16), 1.0f},
                                 0};
  const exec::ProgramResult whole =
      interpreter.run(exec::lower_evaluation(exec::even_stages(model.num_units(), 1), 0, 1), std::span(&mb, 1), {});
  const exec::ProgramResult chunked =
      interpreter.run(exec::lower_evaluation(exec::even_stages(model.num_units(), 2), 0, 1), std::span(&mb, 1), {});
  EXPECT_EQ(chunked.counted, whole.counted);
  EXPECT_EQ(chunked.loss_sum, whole.loss_sum);
}

// A program that would run a unit without what it needs is refused, naming the action.
TEST(Interpreter, RefusesProgramsThatBreakTheChain) {
  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  MemoryAccountant memory;
  nn::GPT model(c, memory, 3);
  exec::ParameterOwnership ownership(model.parameters());
  exec::TransformChain chain;
  exec::Interpreter interpreter(model, ownership, chain, memory);
  std::vector<int32_t> tokens(16, 1);
  const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 1, 16), nn::token_tensor(tokens.data(), 1, 16), 1.0f},
                                 0};
  auto expect_refused = [&](std::vector<exec::Action> actions, const std::string& needle) {
    exec::Program p;
    p.microbatches = 1;
    p.actions = std::move(actions);
    try {
      interpreter.run(p, std::span(&mb, 1), {});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  exec::Action f1;
  f1.unit = 1;
  expect_refused({f1}, "input is not stored");
  exec::Action b0;
  b0.phase = Phase::Backward;
  expect_refused({b0}, "not kept");
  exec::Action f0;
  expect_refused({f0}, "not back-propagated");
}

// Two pipeline ranks of a 3-block model (stage 0: units 0-2, stage 1: units 3-4), 1F1B with two
// microbatches: each rank's program runs its own units, with the transfers at the stage boundary
// naming the slot of unit 3 (the activation into its input, the gradient of its input).
TEST(Programs, PipelineRanksExchangeAtTheStageBoundary) {
  config::ParallelLayout l = one_rank(config::ScheduleKind::OneFOneB, 2);
  l.pp = 2;
  const pipeline::Schedule schedule = pipeline::make_schedule(l);
  const exec::StagePlan plan = exec::even_stages(kUnits, 2);
  ASSERT_EQ(plan.stages[0].last, 3);
  const exec::Program first = exec::lower_training(schedule, 0, plan);
  const exec::Program last = exec::lower_training(schedule, 1, plan);
  EXPECT_EQ(codes(first), (std::vector<std::string>{"F0/m0", "F1/m0", "F2/m0", "sA3/m0>1", "F0/m1", "F1/m1", "F2/m1",
                                                    "sA3/m1>1", "rG3/m0<1", "B2/m0", "B1/m0", "B0/m0", "rG3/m1<1",
                                                    "B2/m1", "B1/m1", "B0/m1", "step"}));
  EXPECT_EQ(codes(last), (std::vector<std::string>{"rA3/m0<0", "F3/m0", "F4/m0", "rA3/m1<0", "B4/m0", "B3/m0",
                                                   "sG3/m0>0", "F3/m1", "F4/m1", "B4/m1", "B3/m1", "sG3/m1>0", "step"}));
  EXPECT_EQ(first.first_unit, 0);
  EXPECT_EQ(last.first_unit, 3);
  EXPECT_EQ(codes(exec::lower_evaluation(plan, 1, 2)), (std::vector<std::string>{"rA3/m0<0", "E3/m0", "E4/m0"}));
  EXPECT_EQ(codes(exec::lower_evaluation(plan, 0, 2)), (std::vector<std::string>{"E0/m0", "E1/m0", "E2/m0", "sA3/m0>1"}));
}


// Stage splits: given block counts, and the split whose slowest stage is fastest by unit cost.
TEST(Programs, StageSplitsAreGivenOrBalancedByCost) {
  // 6 blocks (units 1..6), embedding unit 0, head unit 7.
  const std::vector<int64_t> given = {1, 3, 2};
  const exec::StagePlan plan = exec::stages_of_blocks(8, given);
  ASSERT_EQ(plan.stages.size(), 3u);
  EXPECT_EQ(plan.stages[0].first, 0);
  EXPECT_EQ(plan.stages[0].last, 2);
  EXPECT_EQ(plan.stages[1].first, 2);
  EXPECT_EQ(plan.stages[1].last, 5);
  EXPECT_EQ(plan.stages[2].last, 8);
  EXPECT_EQ(exec::describe_stages(plan), "embedding + block 0 | blocks 1-3 | blocks 4-5 + head");
  // Uniform blocks and a head as costly as two blocks: the last stage takes fewer blocks.
  const std::vector<double> costs = {0.1, 1, 1, 1, 1, 1, 1, 2};
  EXPECT_EQ(exec::describe_stages(exec::balanced_stages(costs, 2)), "embedding + blocks 0-3 | blocks 4-5 + head");
  // Equal costs either way: the earlier stage gets the fewer blocks (it holds the most microbatches).
  const std::vector<double> even = {0, 1, 1, 1, 0};
  EXPECT_EQ(exec::describe_stages(exec::balanced_stages(even, 2)), "embedding + block 0 | blocks 1-2 + head");
  EXPECT_EQ(exec::describe_stages(exec::balanced_stages(costs, 1)), "embedding + blocks 0-5 + head");
  EXPECT_THROW(exec::balanced_stages(costs, 7), tessera::Error);
  const std::vector<int64_t> short_split = {1, 2};
  EXPECT_THROW(exec::stages_of_blocks(8, short_split), tessera::Error);
}

// On one stage the program walk gives the chain simulator's closed form: with I microbatches alive
// at once, (I − 1)·R + P, for every recompute policy; the pipelined programs are checked against
// the allocator on every rank by pipeline_parity_test.
TEST(ProgramMemory, OneStageWalkEqualsTheChainFormula) {
  const config::ModelConfig model = tessera::testing::gpt2_odd_config();
  const int units = model.n_layer + 2, B = 2, T = 8;
  for (config::RecomputePolicy policy : {config::RecomputePolicy::None, config::RecomputePolicy::Full,
                                         config::RecomputePolicy::EveryK, config::RecomputePolicy::Selective}) {
    exec::StagePlan plan = exec::even_stages(units, 1);
    exec::RecomputeOptions options;
    options.policy = policy;
    exec::plan_recompute(plan, model, B, T, options, exec::nominal_unit_times(model, B, T));
    for (const auto& [kind, alive] : {std::pair{config::ScheduleKind::OneFOneB, 1}, std::pair{config::ScheduleKind::GPipe, 3}}) {
      const exec::Program program = exec::lower_training(pipeline::make_schedule(one_rank(kind, 3)), 0, plan);
      const exec::ProgramMemory walk = exec::predict_program_memory(program, model, B, T);
      EXPECT_EQ(walk.peak, exec::predict_activations(plan, model, B, T, alive).peak)
          << config::recompute_policy_name(policy) << " " << config::schedule_name(kind);
      EXPECT_EQ(walk.after.back(), 0) << "every activation is freed by the end of the step";
      ASSERT_EQ(walk.during.size(), program.actions.size());
    }
  }
}

// Checkmate's graph holds each block's rebuildable part (its norm outputs and MLP activation) as a node
// of its own, so between Rotor's least budget and none's peak it keeps some blocks selectively, where
// Rotor reruns whole blocks: the program carries those forwards as keeping all with `selective`, its
// walk equals the chain's prediction, and the schedule costs less than Rotor's at the same budget.
TEST(ProgramMemory, CheckmateKeepsBlocksSelectivelyWhereRotorRecomputesThem) {
  // Blocks wide against the vocabulary, so that they, not the head's logits, make the peak.
  config::ModelConfig model = tessera::testing::gpt2_odd_config();
  model.n_layer = 6;
  model.n_embd = 48;
  const int units = model.n_layer + 2, B = 2, T = 16;
  const exec::UnitTimes times = exec::nominal_unit_times(model, B, T);
  exec::StagePlan none_plan = exec::even_stages(units, 1);
  exec::plan_recompute(none_plan, model, B, T, {}, times);
  const int64_t none_peak = exec::predict_activations(none_plan, model, B, T, 1).peak;
  exec::StagePlan full_plan = exec::even_stages(units, 1);
  exec::plan_recompute(full_plan, model, B, T, {.policy = config::RecomputePolicy::Full}, times);
  const int64_t full_peak = exec::predict_activations(full_plan, model, B, T, 1).peak;
  const std::vector<memory::ChainUnit> chain = exec::stage_chain(model, none_plan.stages.front(), B, T, false, times);
  int selective_plans = 0;
  for (int k = 1; k <= 3; ++k) {
    const int64_t budget = full_peak + (none_peak - full_peak) * k / 4;
    SCOPED_TRACE(fmt::format("budget {} between full's {} and none's {}", budget, full_peak, none_peak));
    exec::StagePlan plan = exec::even_stages(units, 1);
    exec::plan_recompute(plan, model, B, T,
                         {.policy = config::RecomputePolicy::Checkmate, .budget_bytes = budget, .solver_seconds = 30},
                         times);
    ASSERT_TRUE(plan.stages.front().checkmate.has_value());
    const exec::Program program = exec::lower_training(pipeline::make_schedule(one_rank(config::ScheduleKind::OneFOneB, 1)), 0, plan);
    int selective_forwards = 0;
    for (const exec::Action& a : program.actions) {
      EXPECT_NE(a.keep, memory::Keep::Selective) << "a selective keep lowers to keeping all, selectively";
      selective_forwards += a.selective;
      if (a.selective) EXPECT_TRUE(exec::is_forward(a.phase) && a.keep == memory::Keep::All);
    }
    const int64_t predicted = exec::predict_activations(plan, model, B, T, 1).peak;
    EXPECT_EQ(exec::predict_program_memory(program, model, B, T).peak, predicted);
    EXPECT_LE(predicted, budget);
    exec::StagePlan rotor = exec::even_stages(units, 1);
    exec::plan_recompute(rotor, model, B, T, {.policy = config::RecomputePolicy::Optimal, .budget_bytes = budget}, times);
    const double checkmate_time = memory::simulate(chain, plan.stages.front().recompute).time;
    const double rotor_time = memory::simulate(chain, rotor.stages.front().recompute).time;
    EXPECT_LE(checkmate_time, rotor_time * (1 + 1e-9));
    std::printf("budget %lld: checkmate %.4f rotor %.4f selective %d\n", (long long)budget, checkmate_time, rotor_time, selective_forwards);
    if (selective_forwards > 0) {
      ++selective_plans;
      EXPECT_LT(checkmate_time, rotor_time);
    }
  }
  EXPECT_GE(selective_plans, 2);
}

// The planner with this engine's accounting (plan::ActivationAccounting::Engine) predicts what the
// runtime's program walk predicts, which the allocator measures (pipeline and tensor-parallel
// parity tests): one stage exactly, for every policy, tp, sp, dtype and schedule; pipeline stages
// within the one receive buffer the walk counts and the planner books under comm.
TEST(ProgramMemory, PlannerWithTheEngineAccountingPredictsTheWalk) {
  config::ModelConfig gpt2;
  gpt2.n_layer = 4;
  gpt2.n_head = 4;
  gpt2.n_embd = 32;
  gpt2.vocab_size = 61;  // odd: padded under tp
  gpt2.seq_len = 16;
  config::ModelConfig llama = gpt2;
  llama.arch = config::Architecture::Llama;
  llama.n_kv_head = 2;
  llama.bias = false;
  llama.tied_embeddings = false;
  const int B = 2, T = 16;
  // One policy type: the planner predicts the policy the runtime runs.
  const config::RecomputePolicy policies[] = {config::RecomputePolicy::None, config::RecomputePolicy::Selective,
                                              config::RecomputePolicy::Full, config::RecomputePolicy::EveryK};
  for (const config::ModelConfig& model : {gpt2, llama}) {
    for (const auto& [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}}) {
      for (const plan::Precision precision : {plan::Precision::Fp32, plan::Precision::Bf16}) {
        const DType dtype = precision == plan::Precision::Bf16 ? DType::BF16 : DType::F32;
        for (const config::RecomputePolicy policy : policies) {
          for (const int pp : {1, 2}) {
            for (const auto& [kind, microbatches] : {std::pair{config::ScheduleKind::OneFOneB, 4},
                                                     std::pair{config::ScheduleKind::GPipe, 3}}) {
              plan::Layout layout;
              layout.tp = tp;
              layout.sp = sp;
              layout.pp = pp;
              layout.schedule = kind;
              layout.micro_batch = B;
              layout.global_batch = int64_t{B} * microbatches;
              layout.recompute = policy;
              layout.precision = precision;
              config::ParallelLayout pipeline = layout;
              pipeline.tp = 1;  // the schedule's ranks are the pipeline's
              pipeline.sp = false;
              pipeline.micro_batch = 1;
              pipeline.global_batch = microbatches;
              exec::StagePlan stages = exec::even_stages(model.n_layer + 2, pp);
              exec::RecomputeOptions options;
              options.policy = policy;
              options.every_k = plan::resolved_recompute_every(model, layout);
              exec::plan_recompute(stages, model, B, T, options, exec::nominal_unit_times(model, B, T), tp, sp, dtype);
              const auto schedule = pipeline::make_schedule(pipeline);
              for (int stage = 0; stage < pp; ++stage) {
                const exec::Program program = exec::lower_training(schedule, stage, stages);
                const int64_t walk = exec::predict_program_memory(program, model, B, T, tp, sp, dtype).peak;
                const double planned = plan::stage_memory(model, layout, stage, plan::closed_form_pipeline()).activations;
                const std::string where = fmt::format("{} tp={} sp={} {} {} pp={} stage {} {}", config::architecture_name(model.arch),
                                                      tp, sp, dtype_name(dtype), config::recompute_policy_name(policy),
                                                      pp, stage, config::schedule_name(kind));
                if (pp == 1) {
                  EXPECT_EQ(static_cast<int64_t>(planned), walk) << where;
                } else {
                  // The walk also counts a receive buffer posted ahead of the backward it overlaps
                  // (1F1B's later stages), which the planner books under comm: at most one
                  // boundary tensor more.
                  const int64_t boundary = config::unit_activation_bytes(model, B, T, tp, sp, dtype)[1].output;
                  EXPECT_GE(walk, static_cast<int64_t>(planned)) << where;
                  EXPECT_LE(walk - static_cast<int64_t>(planned), boundary) << where;
                }
              }
            }
          }
        }
      }
    }
  }
}

// every_k's default segment length is each stage's ceil(sqrt(blocks)), in the runtime and in the
// planner alike: 12 blocks over two stages run segments of 3 (not ceil(sqrt(12)) = 4, the whole
// model's), which is the schedule the planner predicts for each stage.
TEST(ProgramMemory, EveryKDefaultsToEachStagesSegmentLengthAsThePlannerPredicts) {
  config::ModelConfig model;
  model.n_layer = 12;
  model.n_head = 4;
  model.n_embd = 32;
  model.vocab_size = 61;
  model.seq_len = 16;
  const int B = 2, T = 16;
  exec::StagePlan stages = exec::even_stages(model.n_layer + 2, 2);
  exec::RecomputeOptions options;
  options.policy = config::RecomputePolicy::EveryK;
  exec::plan_recompute(stages, model, B, T, options, exec::nominal_unit_times(model, B, T));
  plan::Layout layout;
  layout.pp = 2;
  layout.micro_batch = B;
  layout.global_batch = 4 * B;
  layout.recompute = config::RecomputePolicy::EveryK;
  layout.precision = plan::Precision::Fp32;
  for (int stage = 0; stage < 2; ++stage) {
    const plan::ChunkRecompute planned = plan::chunk_recompute(model, layout, stage);
    EXPECT_EQ(planned.every_k, 3) << "stage " << stage;
    EXPECT_EQ(stages.stages[static_cast<size_t>(stage)].recompute, planned.schedule) << "stage " << stage;
  }
}

// With this engine's state accounting (states=engine, what `tessera plan --config` predicts) the
// activations tag is the walk to the byte on every stage of 1F1B and GPipe: it also counts the
// receive a later 1F1B stage posts ahead into an activation buffer.
TEST(ProgramMemory, PlannerWithTheEngineStatesPredictsTheWalkExactly) {
  config::ModelConfig model;
  model.n_layer = 4;
  model.n_head = 4;
  model.n_embd = 32;
  model.vocab_size = 61;
  model.seq_len = 16;
  model.dropout = 0.1f;
  const int B = 2, T = 16;
  for (const auto& [tp, sp] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}}) {
    for (const int pp : {1, 2}) {
      for (const auto& [kind, microbatches] : {std::pair{config::ScheduleKind::OneFOneB, 4},
                                               std::pair{config::ScheduleKind::GPipe, 3}}) {
        plan::Layout layout;
        layout.tp = tp;
        layout.sp = sp;
        layout.pp = pp;
        layout.schedule = kind;
        layout.micro_batch = B;
        layout.global_batch = int64_t{B} * microbatches;
        layout.precision = plan::Precision::Fp32;
        layout.states = plan::StateAccounting::Engine;
        config::ParallelLayout pipeline = layout;
        pipeline.tp = 1;
        pipeline.sp = false;
        pipeline.micro_batch = 1;
        pipeline.global_batch = microbatches;
        exec::StagePlan stages = exec::even_stages(model.n_layer + 2, pp);
        exec::plan_recompute(stages, model, B, T, exec::RecomputeOptions{}, exec::nominal_unit_times(model, B, T), tp, sp,
                             DType::F32);
        const auto schedule = pipeline::make_schedule(pipeline);
        for (int stage = 0; stage < pp; ++stage) {
          const exec::Program program = exec::lower_training(schedule, stage, stages);
          const int64_t walk = exec::predict_program_memory(program, model, B, T, tp, sp, DType::F32).peak;
          const double planned = plan::stage_memory(model, layout, stage, plan::closed_form_pipeline()).activations;
          EXPECT_EQ(static_cast<int64_t>(planned), walk)
              << fmt::format("tp={} sp={} pp={} stage {} {}", tp, sp, pp, stage, config::schedule_name(kind));
        }
      }
    }
  }
}

// The planner's parameters per rank of an MoE model equal what the model built with this rank's
// expert- and tensor-parallel plans declares: experts split over ep, not over tp; and its FLOPs
// count the router and k experts per token in each MoE block.
TEST(ProgramMemory, PlannerCountsTheMoeParametersAndFlopsOfEachRank) {
  for (config::Architecture arch : {config::Architecture::Gpt2, config::Architecture::Llama}) {
    config::ModelConfig m;
    m.arch = arch;
    m.n_layer = 4;
    m.n_head = 4;
    m.n_embd = 32;
    m.vocab_size = 64;
    m.seq_len = 16;
    m.ffn_hidden = 48;
    m.bias = arch == config::Architecture::Gpt2;
    m.moe_experts = 4;
    m.moe_top_k = 2;
    m.moe_every = 2;
    for (int tp : {1, 2}) {
      for (int ep : {1, 2, 4}) {
        plan::Layout l;
        l.tp = tp;
        l.ep = ep;
        l.dp = 4;
        for (int rank : {0, ep - 1}) {
          MemoryAccountant memory;
          const parallel::TensorParallelPlan tensor(m, tp, 0);
          const parallel::ExpertParallelPlan experts(m, ep, rank, &tensor);
          nn::GPT model(m, memory, 1, &experts);
          EXPECT_EQ(static_cast<double>(model.parameters().numel()), plan::stage_params(m, l, 0).total())
              << config::architecture_name(arch) << " tp " << tp << " ep " << ep << " rank " << rank;
        }
      }
    }
    config::ModelConfig dense = m;
    dense.moe_experts = 0;
    const int64_t B = 8;
    const double mlp = 2.0 * B * m.seq_len * m.n_embd * m.ffn() * (arch == config::Architecture::Gpt2 ? 2 : 3);
    const double router = 2.0 * B * m.seq_len * m.n_embd * m.moe_experts;
    EXPECT_DOUBLE_EQ(plan::step_flops(m, B, config::RecomputePolicy::None, false).forward,
                     plan::step_flops(dense, B, config::RecomputePolicy::None, false).forward + 2 * (router + mlp));
  }
}

namespace {

// Installs in every training action's step context a gradient scale four times the microbatch's,
// as the loss-scaling transform does with its scale.
class QuadrupleGradients final : public exec::Transform {
 public:
  std::string_view name() const override { return "quadruple gradients"; }
  void before(const exec::Event& e) override {
    ASSERT_NE(e.step, nullptr) << "the interpreter's events carry the action's step context";
    if (e.phase != Phase::Eval) e.step->grad_scale *= 4.0f;
  }
};

class SplitsSequences final : public exec::Transform {
 public:
  std::string_view name() const override { return "splits sequences"; }
  nn::SequenceShard sequence_shard() const override { return {0, 2}; }
};

}  // namespace

// What a unit computes with comes in through the chain: a transform that changes the step context
// before an action changes what the action computes, and nothing else.
TEST(Interpreter, TransformsInstallWhatAUnitComputesWithInTheStepContext) {
  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  c.n_layer = 2;
  MemoryAccountant memory;
  nn::GPT model(c, memory, 3);
  exec::ParameterOwnership ownership(model.parameters());
  exec::TransformChain chain;
  exec::Interpreter interpreter(model, ownership, chain, memory);
  std::vector<int32_t> tokens(2 * 16), targets(2 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(i * 7 % 31);
    targets[i] = static_cast<int32_t>(i * 5 % 29);
  }
  const exec::MicrobatchInput mb{
      {nn::token_tensor(tokens.data(), 2, 16), nn::token_tensor(targets.data(), 2, 16), 1.0f / 32}, 0};
  exec::StagePlan plan = exec::even_stages(model.num_units(), 1);
  plan.stages[0].recompute = memory::full_schedule(model.num_units() - 1);
  const exec::Program program =
      exec::lower_training(pipeline::make_schedule(one_rank(config::ScheduleKind::OneFOneB, 1)), 0, plan);
  const auto gradients = [&] {
    model.parameters().zero_grads();
    const exec::ProgramResult result = interpreter.run(program, std::span(&mb, 1), {});
    const Tensor& g = model.parameters().flat_grads();
    const float* p = g.data<float>();
    return std::pair{result.loss_sum, std::vector<float>(p, p + g.numel())};
  };
  const auto [plain_loss, plain] = gradients();
  QuadrupleGradients quadruple;
  chain.add(exec::TransformSlot::LossScaling, quadruple);
  const auto [scaled_loss, scaled] = gradients();
  chain.remove(exec::TransformSlot::LossScaling);
  EXPECT_EQ(scaled_loss, plain_loss) << "the loss does not depend on the gradient scale";
  ASSERT_EQ(scaled.size(), plain.size());
  size_t nonzero = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(scaled[i], 4.0f * plain[i]) << "element " << i << " of the gradients";
    nonzero += plain[i] != 0.0f;
  }
  EXPECT_GT(nonzero, plain.size() / 2);
}

// finish() runs innermost first: the sequence-parallel sum (tensor parallel) reads gradients the
// reduction completed, and the tied embedding's sum (shared parameters) reads them summed over tp.
// At most one transform splits the residual stream's sequences.
TEST(TransformChain, FinishesInnermostFirstAndOneTransformSplitsSequences) {
  std::vector<std::string> log;
  Logger shared("shared", log), tensor("tensor", log), exchange("exchange", log), reduction("reduction", log);
  exec::TransformChain chain;
  chain.add(exec::TransformSlot::GradientReduction, reduction);
  chain.add(exec::TransformSlot::SharedParameters, shared);
  chain.add(exec::TransformSlot::GradientExchange, exchange);
  chain.add(exec::TransformSlot::TensorParallel, tensor);
  exec::Program program;
  chain.begin(program);
  chain.finish(program);
  EXPECT_EQ(log, (std::vector<std::string>{"shared begin", "tensor begin", "exchange begin", "reduction begin",
                                           "reduction finish", "exchange finish", "tensor finish", "shared finish"}));

  EXPECT_EQ(chain.sequence_shard().parts, 1) << "no transform splits the sequences";
  SplitsSequences first, second;
  chain.remove(exec::TransformSlot::TensorParallel);
  chain.add(exec::TransformSlot::TensorParallel, first);
  EXPECT_EQ(chain.sequence_shard().parts, 2);
  chain.add(exec::TransformSlot::ExpertParallel, second);
  EXPECT_THROW(chain.sequence_shard(), Error);
}
