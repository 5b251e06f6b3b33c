// PipeDream-2BW without MPI: lists that continue a run name the versions one long list would, the
// lowered program carries each action's version and batch, the weight-version owner answers each
// action with its version (two at most, the stash under its own memory tag), and the engine on one
// process matches a hand-written loop of the same delayed-gradient semantics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "exec/program.h"
#include "exec/transform.h"
#include "nn/gpt.h"
#include "schedule/generators.h"
#include "schedule/validator.h"
#include "parallel/weight_versions.h"
#include "parity_harness.h"

using namespace tessera;
using tessera::testing::ParityCase;

namespace {

config::ParallelLayout two_bw(int p, int m) {
  config::ParallelLayout layout;
  layout.pp = p;
  layout.schedule = config::ScheduleKind::PipeDream2BW;
  layout.global_batch = m;
  return layout;
}

// (rank, op, microbatch counted from the run's start) -> weight version, for every compute instruction.
using Versions = std::map<std::tuple<int, int, int>, int>;

void add_versions(const pipeline::Schedule& s, Versions& out) {
  for (int r = 0; r < s.ranks; ++r) {
    for (const pipeline::Instruction& ins : s.programs[static_cast<size_t>(r)]) {
      if (ins.op != pipeline::Op::Forward && ins.op != pipeline::Op::Backward) continue;
      out[{r, static_cast<int>(ins.op), s.first_step * s.microbatches + ins.microbatch}] = ins.weight_version;
    }
  }
}

}  // namespace

TEST(PipeDream2BWLists, ContinuedListsReadTheVersionsOfOneLongList) {
  using pipeline::TwoBWVersions;
  for (const TwoBWVersions rule : {TwoBWVersions::Newest, TwoBWVersions::Delayed}) {
    for (int p : {1, 2, 4}) {
      for (int m : {p, p + 1, 2 * p + 1}) {
        Versions whole, pieces;
        add_versions(pipeline::make_schedule(two_bw(p, m), {.steps = 7, .two_bw_versions = rule}), whole);
        for (auto [first, steps] : {std::pair{0, 2}, std::pair{2, 1}, std::pair{3, 4}}) {
          const pipeline::Schedule piece =
              pipeline::make_schedule(two_bw(p, m), {.steps = steps, .first_step = first, .two_bw_versions = rule});
          const pipeline::ValidationReport report = pipeline::check_valid(piece);
          for (int v : report.peak_weight_versions) EXPECT_LE(v, 2) << "p " << p << " m " << m;
          add_versions(piece, pieces);
        }
        EXPECT_EQ(whole, pieces) << "p " << p << " m " << m;
        // Batch b reads max(0, b - 1) under the delay; under the newest only its first p - 1 - r
        // microbatches on rank r do, and the rest read b.
        for (const auto& [key, version] : whole) {
          const int rank = std::get<0>(key), batch = std::get<2>(key) / m, j = std::get<2>(key) % m;
          const bool older = rule == TwoBWVersions::Delayed || j <= p - 2 - rank;
          EXPECT_EQ(version, older ? std::max(0, batch - 1) : batch);
        }
      }
    }
  }
}

TEST(PipeDream2BWLists, FlushingKindsRefuseToContinueARun) {
  config::ParallelLayout layout = two_bw(2, 2);
  layout.schedule = config::ScheduleKind::OneFOneB;
  try {
    pipeline::make_schedule(layout, {.first_step = 3});
    FAIL() << "a flushing schedule accepted first_step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 2bw"), std::string::npos) << e.what();
  }
}

TEST(PipeDream2BWLists, ProgramsCarryVersionsAndBatches) {
  const int p = 2, m = 3, steps = 3, first = 4;
  const pipeline::Schedule s = pipeline::make_schedule(two_bw(p, m), {.steps = steps, .first_step = first});
  for (int rank = 0; rank < p; ++rank) {
    const exec::Program program = exec::lower_training(s, rank, exec::even_stages(6, p));
    EXPECT_EQ(program.batches, steps);
    EXPECT_EQ(program.microbatches, steps * m);
    std::vector<int> step_batches;
    for (const exec::Action& a : program.actions) {
      if (a.kind == exec::Action::Kind::OptimizerStep) {
        step_batches.push_back(a.batch);
        continue;
      }
      EXPECT_EQ(a.batch, a.microbatch / m) << exec::describe(a);
      if (a.kind == exec::Action::Kind::Unit) {
        // The newest version (the default): microbatch 0 of each batch starts on rank 0 before
        // the previous batch's step; everything else reads the batch's own version.
        const bool early = rank == 0 && a.microbatch % m == 0;
        EXPECT_EQ(a.weight_version, first + a.batch - (early ? 1 : 0)) << exec::describe(a);
      }
    }
    EXPECT_EQ(step_batches, (std::vector<int>{0, 1, 2}));
  }
  // A flushing schedule's actions read the newest weights, whichever they are.
  config::ParallelLayout flushing = two_bw(p, m);
  flushing.schedule = config::ScheduleKind::OneFOneB;
  for (const exec::Action& a : exec::lower_training(pipeline::make_schedule(flushing), 0, exec::even_stages(6, p)).actions) {
    EXPECT_EQ(a.weight_version, -1);
    EXPECT_EQ(a.batch, 0);
  }
}

TEST(WeightVersions, AnswerEachActionWithItsVersionAndKeepTwo) {
  MemoryAccountant memory;
  nn::GPT model(tessera::testing::gpt2_odd_config(), memory, 5);
  nn::ParameterStore& store = model.parameters();
  exec::ParameterOwnership ownership(store);
  std::vector<const nn::Parameter*> all;
  for (const nn::Parameter& p : store.all()) all.push_back(&p);
  parallel::WeightVersions versions(store, all, memory, ownership);
  EXPECT_EQ(memory.stats().live_of(MemoryTag::WeightStash), static_cast<size_t>(store.numel()) * sizeof(float));
  EXPECT_EQ(versions.stash_bytes(), static_cast<size_t>(store.numel()) * sizeof(float));

  exec::Program program;
  program.microbatches = 1;
  program.actions.resize(1);
  const exec::Event event{&program, 0};
  const nn::Parameter& wte = store.all().front();
  auto read = [&](int version) {
    program.actions[0].weight_version = version;
    ownership.set_event(&event);
    const float value = ownership.weight(wte).data<float>()[0];
    ownership.set_event(nullptr);
    return value;
  };
  float* live = store.value(wte).data<float>();
  const float v0 = live[0];
  EXPECT_EQ(read(0), v0);
  EXPECT_EQ(read(-1), v0);
  EXPECT_THROW(read(1), Error);  // not made yet

  versions.before_step();  // the step about to run makes version 1
  live[0] = v0 + 1.0f;
  EXPECT_EQ(versions.newest(), 1);
  EXPECT_EQ(read(1), v0 + 1.0f);
  EXPECT_EQ(read(0), v0);  // the stash

  versions.before_step();
  live[0] = v0 + 2.0f;
  EXPECT_EQ(read(2), v0 + 2.0f);
  EXPECT_EQ(read(1), v0 + 1.0f);
  try {
    read(0);  // a third version: double buffering keeps two
    FAIL() << "version 0 was answered with versions 1 and 2 kept";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keeps two versions"), std::string::npos) << e.what();
  }
  EXPECT_EQ(memory.stats().peak_of(MemoryTag::WeightStash), versions.stash_bytes());

  // A checkpoint load: the stash is written through previous(), the version restored.
  for (auto& [p, value] : versions.previous()) {
    if (p == &wte) value.data<float>()[0] = 42.0f;
  }
  versions.restore(7);
  EXPECT_EQ(read(7), v0 + 2.0f);
  EXPECT_EQ(read(6), 42.0f);
  EXPECT_THROW(read(5), Error);
}

TEST(WeightVersions, PipelineRanksStashOnlyTheParametersTheirUnitsRead) {
  MemoryAccountant memory;
  nn::GPT model(tessera::testing::llama_config(), memory, 5);
  const std::vector<int> first_stage = {0, 1};  // the embedding and block 0
  const std::vector<const nn::Parameter*> mine =
      parallel::parameters_of_units(model.parameters(), model.units(), first_stage);
  ASSERT_FALSE(mine.empty());
  for (const nn::Parameter* p : mine) {
    EXPECT_TRUE(p->name.starts_with("embed.") || p->name.starts_with("blocks.0.")) << p->name;
  }
}

// The engine on one process with "2bw" against a loop that keeps the two weight copies by hand:
// the same delayed gradient, whether all steps run in one call or the run drains between calls.
TEST(PipeDream2BWEngine, OneProcessMatchesTheHandWrittenReference) {
  for (const config::ModelConfig& model : {tessera::testing::gpt2_odd_config(), tessera::testing::llama_config()}) {
    ParityCase c;
    c.model = model;
    c.model.dropout = 0.1f;
    c.schedule = config::ScheduleKind::PipeDream2BW;
    c.micros = 2;
    c.global_batch = 4;
    c.steps = 5;
    const tessera::testing::RunRecord reference = tessera::testing::run_reference_2bw(c);
    for (const std::vector<int>& calls : {std::vector<int>{5}, std::vector<int>{1, 3, 1}}) {
      c.steps_per_call = calls;
      const tessera::testing::RunRecord run = tessera::testing::run_parallel(c, nullptr);
      ASSERT_EQ(run.steps.size(), reference.steps.size());
      for (size_t s = 0; s < run.steps.size(); ++s) {
        EXPECT_NEAR(run.steps[s].loss, reference.steps[s].loss, 1e-5 * std::abs(reference.steps[s].loss)) << s;
        EXPECT_NEAR(run.steps[s].grad_norm, reference.steps[s].grad_norm, 1e-5 * reference.steps[s].grad_norm) << s;
      }
      double worst = 0;
      for (size_t i = 0; i < run.params.size(); ++i) {
        worst = std::max(worst, std::abs(double(run.params[i]) - reference.params[i]) /
                                    std::max(1.0, std::abs(double(reference.params[i]))));
      }
      EXPECT_LE(worst, 1e-4) << "calls of " << calls.size();
      EXPECT_EQ(run.weight_stash_bytes, run.optimizer_param_bytes);
    }
    // The delay is real: the synchronous run ends elsewhere.
    const tessera::testing::RunRecord synchronous = tessera::testing::run_reference(c);
    double apart = 0;
    for (size_t i = 0; i < synchronous.params.size(); ++i) {
      apart = std::max(apart, std::abs(double(synchronous.params[i]) - reference.params[i]));
    }
    EXPECT_GT(apart, 1e-4);
  }
}

// At pp = 1 no microbatch starts before the previous step, so the newest-version rule is the
// synchronous run, while the engine still keeps (and pays for) the stash.
TEST(PipeDream2BWEngine, NewestVersionsOnOneStageAreTheSynchronousRun) {
  ParityCase c;
  c.model = tessera::testing::gpt2_odd_config();
  c.model.dropout = 0.1f;
  c.schedule = config::ScheduleKind::PipeDream2BW;
  c.two_bw_versions = pipeline::TwoBWVersions::Newest;
  c.micros = 2;
  c.global_batch = 4;
  c.steps = 5;
  c.steps_per_call = {2, 3};
  const tessera::testing::RunRecord reference = tessera::testing::run_reference(c);
  const tessera::testing::RunRecord run = tessera::testing::run_parallel(c, nullptr);
  ASSERT_EQ(run.steps.size(), reference.steps.size());
  for (size_t s = 0; s < run.steps.size(); ++s) {
    EXPECT_NEAR(run.steps[s].loss, reference.steps[s].loss, 1e-5 * std::abs(reference.steps[s].loss)) << s;
  }
  double worst = 0;
  for (size_t i = 0; i < run.params.size(); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - reference.params[i]));
  }
  EXPECT_LE(worst, 1e-4);
  EXPECT_EQ(run.weight_stash_bytes, run.optimizer_param_bytes);
}

TEST(PipeDream2BWEngine, ABatchOutOfStepWithTheWeightsIsRefused) {
  ParityCase c;
  c.model = tessera::testing::gpt2_odd_config();
  c.schedule = config::ScheduleKind::PipeDream2BW;
  c.micros = 1;
  c.global_batch = 2;
  c.steps = 3;
  c.steps_per_call = {3};
  // The harness numbers its calls from step 0; a fresh engine asked for step 2 must refuse.
  MemoryAccountant memory;
  nn::GPT model(c.model, memory, c.seed);
  parallel::EngineOptions options;
  options.layout.schedule = c.schedule;
  options.layout.micro_batch = 2;
  options.layout.global_batch = 2;
  options.seq_len = c.seq_len;
  options.measure_unit_times = false;
  parallel::TrainingEngine engine(model, memory, nullptr, options);
  std::vector<int32_t> tokens(static_cast<size_t>(2 * c.seq_len), 1);
  const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 2, c.seq_len),
                                  nn::token_tensor(tokens.data(), 2, c.seq_len), 1.0f / 32},
                                 0};
  const float lr = 1e-3f;
  try {
    engine.train_batches(std::span(&mb, 1), {c.seed, 2}, std::span(&lr, 1), 1.0);
    FAIL() << "step 2 ran on weight version 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("restore"), std::string::npos) << e.what();
  }
  engine.restore_weight_versions(2);  // as after a checkpoint load (the stash loaded alongside)
  EXPECT_NO_THROW(engine.train_batches(std::span(&mb, 1), {c.seed, 2}, std::span(&lr, 1), 1.0));
  EXPECT_EQ(engine.weight_versions()->newest(), 3);
}
