// Execution through the engine on one process: every recompute policy gives bitwise the losses,
// gradient norms and parameters of no recomputation (with dropout), and its measured activation
// peak is the predicted one exactly; split backwards give the bits of whole ones; non-finite
// gradients skip the step; the optimizer's state and parameter shard specs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/rng.h"
#include "exec/recompute.h"
#include "optim/adamw.h"
#include "parity_harness.h"

using namespace tessera;
using tessera::testing::ParityCase;
using tessera::testing::RunRecord;

namespace {

ParityCase with_dropout(config::ModelConfig model, int micros) {
  ParityCase c;
  c.model = model;
  c.model.dropout = 0.1f;  // recomputed forwards must draw the same masks
  c.micros = micros;
  c.steps = 3;
  return c;
}

void expect_bitwise(const RunRecord& got, const RunRecord& want, const std::string& what) {
  ASSERT_EQ(got.steps.size(), want.steps.size()) << what;
  for (size_t s = 0; s < want.steps.size(); ++s) {
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << what << ": step " << s;
    EXPECT_EQ(got.steps[s].grad_norm, want.steps[s].grad_norm) << what << ": step " << s;
  }
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), sizeof(float) * want.params.size()), 0) << what;
}

void expect_close(const RunRecord& got, const RunRecord& want, const std::string& what) {
  for (size_t s = 0; s < want.steps.size(); ++s) {
    EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss, 1e-5 * std::abs(want.steps[s].loss)) << what << ": step " << s;
  }
  double worst = 0;
  for (size_t i = 0; i < want.params.size(); ++i) {
    worst = std::max(worst, std::abs(double(got.params[i]) - want.params[i]) / std::max(1.0, std::abs(double(want.params[i]))));
  }
  EXPECT_LE(worst, 1e-4) << what;
}

void expect_peak_as_predicted(const RunRecord& run, const std::string& what) {
  for (const tessera::testing::StepRecord& s : run.steps) {
    ASSERT_GT(s.predicted_activations, 0) << what;
    EXPECT_EQ(static_cast<int64_t>(s.memory.peak_of(MemoryTag::Activations)), s.predicted_activations) << what;
  }
}

std::string name_of(const ParityCase& c) {
  return fmt::format("{} {} {} every_k {} budget {}", config::architecture_name(c.model.arch),
                     config::schedule_name(c.schedule), config::recompute_policy_name(c.recompute.policy),
                     c.recompute.every_k, c.recompute.budget_bytes);
}

}  // namespace

// The interpreter running the one-stage 1F1B program of one microbatch is the straight chain.
TEST(Execution, OneMicrobatchEqualsTheStraightModelBitwise) {
  for (const config::ModelConfig& m : {tessera::testing::gpt2_odd_config(), tessera::testing::llama_config()}) {
    ParityCase c = with_dropout(m, 1);
    expect_bitwise(tessera::testing::run_data_parallel(c, nullptr), tessera::testing::run_reference(c), config::architecture_name(m.arch));
  }
}

TEST(Execution, EveryRecomputePolicyEqualsNoneBitwiseAndPeaksAsPredicted) {
  for (const config::ModelConfig& m : {tessera::testing::gpt2_odd_config(), tessera::testing::llama_config()}) {
    ParityCase base = with_dropout(m, 2);
    base.model.n_layer = 4;  // room for segments and for an optimal schedule between the extremes
    const RunRecord none = tessera::testing::run_data_parallel(base, nullptr);
    expect_peak_as_predicted(none, name_of(base));
    ParityCase full = base;
    full.recompute.policy = config::RecomputePolicy::Full;
    const RunRecord full_run = tessera::testing::run_data_parallel(full, nullptr);
    const int64_t none_peak = none.steps[0].predicted_activations, full_peak = full_run.steps[0].predicted_activations;
    EXPECT_LT(full_peak, none_peak) << "full recomputation keeps less";

    std::vector<ParityCase> cases = {full};
    for (int k : {1, 2, 3}) {
      ParityCase c = base;
      c.recompute = {config::RecomputePolicy::EveryK, k, 0};
      cases.push_back(c);
    }
    ParityCase selective = base;
    selective.recompute.policy = config::RecomputePolicy::Selective;
    cases.push_back(selective);
    for (int64_t budget : {full_peak, (full_peak + none_peak) / 2, none_peak}) {
      ParityCase c = base;
      c.recompute = {config::RecomputePolicy::Optimal, 0, budget};
      cases.push_back(c);
      c.recompute.policy = config::RecomputePolicy::Dtr;
      cases.push_back(c);
    }
    for (const ParityCase& c : cases) {
      const RunRecord run = tessera::testing::run_data_parallel(c, nullptr);
      expect_bitwise(run, none, name_of(c));
      expect_peak_as_predicted(run, name_of(c));
      if (c.recompute.policy == config::RecomputePolicy::Optimal || c.recompute.policy == config::RecomputePolicy::Dtr) {
        EXPECT_LE(run.steps[0].predicted_activations, c.recompute.budget_bytes) << name_of(c);
      } else {
        EXPECT_LT(run.steps[0].predicted_activations, none_peak) << name_of(c) << " should save memory";
      }
    }
  }
}

// Zero-bubble's split backward accumulates the same products in the same order as the whole one;
// GPipe and the interleaved order add microbatches' gradients in another order.
TEST(Execution, SplitBackwardIsBitwiseAndOtherSchedulesAgree) {
  for (const config::ModelConfig& m : {tessera::testing::gpt2_odd_config(), tessera::testing::llama_config()}) {
    ParityCase base = with_dropout(m, 2);
    const RunRecord one_f_one_b = tessera::testing::run_data_parallel(base, nullptr);
    for (config::RecomputePolicy policy : {config::RecomputePolicy::None, config::RecomputePolicy::Full}) {
      ParityCase zb = base;
      zb.schedule = config::ScheduleKind::ZeroBubbleH1;
      zb.recompute.policy = policy;
      expect_bitwise(tessera::testing::run_data_parallel(zb, nullptr), one_f_one_b, name_of(zb));
    }
    ParityCase gpipe = base;
    gpipe.schedule = config::ScheduleKind::GPipe;
    const RunRecord gpipe_run = tessera::testing::run_data_parallel(gpipe, nullptr);
    expect_close(gpipe_run, one_f_one_b, name_of(gpipe));
    expect_peak_as_predicted(gpipe_run, name_of(gpipe) + " (two microbatches alive)");
    EXPECT_GT(gpipe_run.steps[0].predicted_activations, one_f_one_b.steps[0].predicted_activations);
  }
}


TEST(Execution, ANonFiniteGradientSkipsTheStep) {
  for (int stage : {0, 2}) {
    MemoryAccountant memory;
    nn::GPT model(tessera::testing::gpt2_odd_config(), memory, 5);
    parallel::EngineOptions options;
    options.layout.zero_stage = stage;
    options.layout.global_batch = 1;
    options.seq_len = 16;
    parallel::TrainingEngine engine(model, memory, nullptr, options);
    tessera::testing::PoisonGradient poison(engine.ownership(), model.parameters().get("embed.positions.weight"), 2);
    engine.transforms().add(exec::TransformSlot::Observer, poison);
    std::vector<int32_t> tokens(16);
    for (int i = 0; i < 16; ++i) tokens[static_cast<size_t>(i)] = i;
    const exec::MicrobatchInput mb{{nn::token_tensor(tokens.data(), 1, 16), nn::token_tensor(tokens.data(), 1, 16),
                                    1.0f / 16},
                                   0};
    auto snapshot = [&] {
      auto full = engine.full_parameters();
      std::vector<float> v;
      for (const auto& p : model.parameters().all()) {
        const float* x = full.weight(p).data<float>();
        v.insert(v.end(), x, x + p.numel());
      }
      return v;
    };
    const auto first = engine.train_step(std::span(&mb, 1), {}, 1e-3f, 1.0);  // program 1: clean
    EXPECT_FALSE(first.skipped);
    const std::vector<float> before = snapshot();
    const auto second = engine.train_step(std::span(&mb, 1), {}, 1e-3f, 1.0);  // program 2: poisoned
    EXPECT_TRUE(second.skipped) << "stage " << stage;
    EXPECT_TRUE(second.grad_norm.non_finite);
    EXPECT_EQ(snapshot(), before) << "a skipped step changes no parameter";
    EXPECT_EQ(engine.optimizer().steps_taken(), 1) << "nor the optimizer's step count";
    const auto third = engine.train_step(std::span(&mb, 1), {}, 1e-3f, 1.0);
    EXPECT_FALSE(third.skipped);
    EXPECT_EQ(engine.optimizer().steps_taken(), 2);
    engine.transforms().remove(exec::TransformSlot::Observer);
  }
}

// The state dict is the optimizer's state: a second optimizer loaded from it steps to the same bits.
TEST(Optimizer, StateDictRoundTrip) {
  MemoryAccountant memory;
  nn::GPT a(tessera::testing::gpt2_odd_config(), memory, 1), b(tessera::testing::gpt2_odd_config(), memory, 1);
  const int64_t n = a.parameters().numel();
  for (nn::GPT* m : {&a, &b}) {
    float* g = m->parameters().flat_grads().data<float>();
    for (int64_t i = 0; i < n; ++i) g[i] = uniform(3, 4, static_cast<uint64_t>(i)) - 0.5f;
  }
  optim::AdamW first(memory, {}, n);
  first.step(1e-2f, optim::whole_parameters(a.parameters()));
  first.step(1e-2f, optim::whole_parameters(a.parameters()));
  // b catches up with a's parameters and takes a's optimizer state.
  b.parameters().flat_values().copy_from(a.parameters().flat_values());
  optim::AdamW second(memory, {}, n);
  second.load_state_dict(first.state_dict());
  EXPECT_EQ(second.steps_taken(), 2);
  first.step(1e-2f, optim::whole_parameters(a.parameters()));
  second.step(1e-2f, optim::whole_parameters(b.parameters()));
  EXPECT_EQ(std::memcmp(a.parameters().flat_values().data<float>(), b.parameters().flat_values().data<float>(),
                        sizeof(float) * static_cast<size_t>(n)),
            0);
  optim::AdamW smaller(memory, {}, n - 1);
  EXPECT_THROW(smaller.load_state_dict(first.state_dict()), Error);
}

// A fused q, k, v weight split by heads: each rank holds its rows of q, of k and of v, and they
// initialize to exactly those rows of the whole one; padding rows start at zero.
TEST(Parameters, BlockedSplitsAndPaddingRowsInitializeFromGlobalIndices) {
  MemoryAccountant memory;
  nn::ParameterStore whole;
  whole.declare("qkv", {12, 2}, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
  whole.declare("table", {5, 2}, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
  whole.allocate(memory);
  whole.initialize(9);
  const float* w = whole.value(whole.get("qkv")).data<float>();
  const float* table = whole.value(whole.get("table")).data<float>();
  for (int index : {0, 1}) {
    nn::ParameterStore part;
    nn::ShardSpec qkv;
    qkv.global_shape = {12, 2};
    qkv.splits = {{0, config::MeshDim::TP, 2, index, {4, 4, 4}}};
    nn::ShardSpec padded;  // 5 rows padded to 6, in pieces of 3: rank 1 holds rows 3, 4 and the padding
    padded.global_shape = {6, 2};
    padded.padding_rows = 1;
    padded.splits = {{0, config::MeshDim::TP, 2, index, {}}};
    const nn::Parameter& p = part.declare_sharded("qkv", qkv, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
    const nn::Parameter& t = part.declare_sharded("table", padded, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
    part.allocate(memory);
    part.initialize(9);
    ASSERT_EQ(p.shape, (Shape{6, 2}));
    EXPECT_EQ(t.spec.unpadded_shape(), (Shape{5, 2}));
    EXPECT_EQ(t.spec.start(0), 3 * index);
    const float* v = part.value(p).data<float>();
    for (int block = 0; block < 3; ++block) {
      for (int r = 0; r < 2; ++r) {
        const int global_row = block * 4 + index * 2 + r;
        for (int c = 0; c < 2; ++c) {
          EXPECT_EQ(v[(block * 2 + r) * 2 + c], w[global_row * 2 + c]) << "piece " << index << " block " << block;
        }
      }
    }
    const float* tv = part.value(t).data<float>();
    for (int r = 0; r < 3; ++r) {
      const int global_row = 3 * index + r;
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(tv[r * 2 + c], global_row < 5 ? table[global_row * 2 + c] : 0.0f) << "row " << global_row;
      }
    }
  }
  nn::ParameterStore bad;
  nn::ShardSpec uneven;
  uneven.global_shape = {12, 2};
  uneven.splits = {{0, config::MeshDim::TP, 2, 0, {3, 3, 6}}};
  EXPECT_THROW(bad.declare_sharded("qkv", uneven, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f), Error) << "blocks of 3 rows in 2 pieces";
}

// A parameter split over a mesh dimension initializes to exactly its block of the whole one.
TEST(Parameters, ShardsInitializeFromGlobalIndices) {
  MemoryAccountant memory;
  nn::ParameterStore whole;
  whole.declare("w", {6, 4}, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
  whole.allocate(memory);
  whole.initialize(9);
  const float* w = whole.value(whole.get("w")).data<float>();
  for (int dim : {0, 1}) {
    for (int index : {0, 1}) {
      nn::ParameterStore part;
      nn::ShardSpec spec;
      spec.global_shape = {6, 4};
      spec.splits = {{dim, config::MeshDim::TP, 2, index, {}}};
      const nn::Parameter& p = part.declare_sharded("w", spec, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
      part.allocate(memory);
      part.initialize(9);
      EXPECT_EQ(p.shape, dim == 0 ? (Shape{3, 4}) : (Shape{6, 2}));
      EXPECT_EQ(p.spec.split_mask(), 1u << static_cast<int>(config::MeshDim::TP));
      EXPECT_FALSE(p.spec.replicated_over(config::MeshDim::TP));
      EXPECT_TRUE(p.spec.replicated_over(config::MeshDim::DP));
      const float* v = part.value(p).data<float>();
      for (int64_t r = 0; r < p.shape[0]; ++r) {
        for (int64_t col = 0; col < p.shape[1]; ++col) {
          const int64_t gr = dim == 0 ? r + 3 * index : r, gc = dim == 1 ? col + 2 * index : col;
          EXPECT_EQ(v[r * p.shape[1] + col], w[gr * 4 + gc]) << "split dim " << dim << " piece " << index;
        }
      }
    }
  }
  nn::ParameterStore bad;
  nn::ShardSpec spec;
  spec.global_shape = {5, 4};
  spec.splits = {{0, config::MeshDim::TP, 2, 0, {}}};
  EXPECT_THROW(bad.declare_sharded("w", spec, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f), Error) << "5 rows do not split in 2";
}
