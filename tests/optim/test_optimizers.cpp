// Every optimizer of optim.name against an independent reference, step by step on small tensors:
// LAMB, LARS, Adafactor and 8-bit AdamW against transcriptions of their papers in double
// (reference_optimizers.h); their state bytes as the allocator measures them against the formula;
// a state saved and loaded into a fresh optimizer continuing bit for bit; ranges of a parameter
// (as ZeRO gives) with no reduction refused where a whole-tensor statistic would be wrong.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <random>

#include "optim/adam8bit.h"
#include "optim/make_optimizer.h"
#include "optim/quantization.h"
#include "reference_optimizers.h"

namespace tessera {
namespace {

using testing::RefHyper;
using testing::RefTensor;

// A small model's worth of tensors: an embedding, a large matrix (quantized by adam8bit, blocks
// cut at 2048 and a partial last one), a small matrix, a bias and a norm gain.
struct Model {
  MemoryAccountant memory;
  nn::ParameterStore store;
  Model() {
    store.declare("embed.tokens.weight", {40, 8}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
    store.declare("blocks.0.mlp.fc.weight", {64, 80}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
    store.declare("blocks.0.mlp.fc.bias", {64}, nn::ParameterRole::Bias, nn::Init::Normal, 0.5f);
    store.declare("blocks.0.ln.weight", {80}, nn::ParameterRole::NormGain, nn::Init::Ones);
    store.declare("blocks.0.attn.proj.weight", {12, 10}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
    store.allocate(memory);
    store.initialize(5);
  }
  std::vector<RefTensor> reference() {
    std::vector<RefTensor> out;
    for (const nn::Parameter& p : store.all()) {
      RefTensor t;
      t.name = p.name;
      t.matrix = p.shape.size() >= 2;
      t.rows = t.matrix ? p.shape[0] : 1;
      t.cols = p.shape.back();
      const float* w = store.value(p).data<float>();
      t.w.assign(w, w + p.numel());
      out.push_back(t);
    }
    return out;
  }
  // Gradients of step `s`: fixed normal draws, a different scale per tensor.
  std::vector<std::vector<double>> draw_gradients(int s) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(s));
    std::vector<std::vector<double>> out;
    for (const nn::Parameter& p : store.all()) {
      std::normal_distribution<float> normal(0.0f, 0.01f * static_cast<float>(p.id + 1));
      float* g = store.grad_of(p).data<float>();
      std::vector<double> copy;
      for (int64_t i = 0; i < p.numel(); ++i) {
        g[i] = normal(rng);
        copy.push_back(g[i]);
      }
      out.push_back(copy);
    }
    return out;
  }
};

optim::OptimizerConfig settings(const std::string& name, const RefHyper& h) {
  optim::OptimizerConfig c;
  c.kind = optim::parse_optimizer_kind(name);
  c.beta1 = static_cast<float>(h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.weight_decay = static_cast<float>(h.weight_decay);
  c.momentum = static_cast<float>(h.momentum);
  c.trust_coefficient = static_cast<float>(h.trust);
  c.unadapted_lr_scale = static_cast<float>(h.unadapted_lr_scale);
  c.decay_rate = static_cast<float>(h.decay_rate);
  c.clip_threshold = static_cast<float>(h.clip);
  c.first_moment = h.first_moment;
  c.relative_step = h.relative_step;
  c.block_size = h.block;
  c.quantization = h.linear ? "linear" : "dynamic";
  c.variance_freeze_step = h.variance_freeze;
  return c;
}

// Runs `steps` steps of tessera's optimizer and the reference on the same gradients; after each,
// every weight within `tolerance` (relative to max(1, |w|)) of the reference.
template <class Reference>
void expect_matches(const std::string& name, const RefHyper& h, double tolerance, int steps = 6) {
  Model model;
  std::vector<RefTensor> ref = model.reference();
  Reference reference;
  const std::vector<optim::Segment> segments = optim::whole_parameters(model.store);
  std::unique_ptr<optim::Optimizer> opt =
      optim::make_optimizer(model.memory, settings(name, h), model.store, segments, nullptr);
  for (int s = 0; s < steps; ++s) {
    const std::vector<std::vector<double>> grads = model.draw_gradients(s);
    reference.step(ref, grads, h);
    opt->step(static_cast<float>(h.lr), segments);
    for (size_t k = 0; k < ref.size(); ++k) {
      const nn::Parameter& p = model.store.all()[k];
      const float* w = model.store.value(p).data<float>();
      double worst = 0, moved = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double err = std::abs(double(w[i]) - ref[k].w[size_t(i)]) / std::max(1.0, std::abs(ref[k].w[size_t(i)]));
        if (err > worst) worst = err, at = i;
      }
      ASSERT_LE(worst, tolerance) << name << " step " << s + 1 << " " << p.name << " element " << at << ": "
                                  << w[at] << " vs reference " << ref[k].w[size_t(at)];
      (void)moved;
    }
  }
  EXPECT_EQ(opt->steps_taken(), steps);
}

TEST(Optimizers, LambMatchesThePaper) {
  RefHyper h;
  h.lr = 1e-2;
  expect_matches<testing::RefLamb>("lamb", h, 2e-6);
  h.unadapted_lr_scale = 0.1;
  expect_matches<testing::RefLamb>("lamb", h, 2e-6);
}

TEST(Optimizers, LarsMatchesThePaper) {
  RefHyper h;
  h.lr = 2.0;  // LARS' global rate multiplies the trust coefficient 0.001
  h.weight_decay = 5e-4;
  expect_matches<testing::RefLars>("lars", h, 2e-6);
  h.momentum = 0.0;
  expect_matches<testing::RefLars>("lars", h, 2e-6);
  h.unadapted_lr_scale = 0.01;
  expect_matches<testing::RefLars>("lars", h, 2e-6);
}

TEST(Optimizers, AdafactorMatchesThePaper) {
  RefHyper h;
  h.lr = 1e-2;
  expect_matches<testing::RefAdafactor>("adafactor", h, 2e-6);
  h.first_moment = true;
  h.relative_step = true;
  h.clip = 0.5;  // clipping acts
  h.decay_rate = 0.6;
  expect_matches<testing::RefAdafactor>("adafactor", h, 2e-6);
}

// An MoE layer's experts are stacked ([E, F, C] weights, [E, F] biases), but each is a weight of
// its own: Adafactor on the stacks moves every element exactly as it moves E separate matrices and
// E separate bias vectors (their factored moments, update clipping and relative step included), so
// expert parallelism, which gives each rank whole experts, splits none of its statistics.
TEST(Optimizers, AdafactorTakesEachExpertOfAStackAsAWeightOfItsOwn) {
  constexpr int64_t E = 3, F = 4, C = 5;
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::Adafactor;
  c.first_moment = true;
  c.relative_step = true;
  c.clip_threshold = 0.5f;  // clipping acts
  c.weight_decay = 0.1f;
  MemoryAccountant memory;
  nn::ParameterStore stacked, separate;
  stacked.declare("fc.weight", {E, F, C}, nn::ParameterRole::Weight, nn::Init::Normal, 0.02f);
  stacked.declare("fc.bias", {E, C}, nn::ParameterRole::Bias, nn::Init::Normal, 0.02f);
  for (int64_t e = 0; e < E; ++e) separate.declare(fmt::format("w{}", e), {F, C}, nn::ParameterRole::Weight, nn::Init::Zeros);
  for (int64_t e = 0; e < E; ++e) separate.declare(fmt::format("b{}", e), {C}, nn::ParameterRole::Bias, nn::Init::Zeros);
  for (nn::ParameterStore* store : {&stacked, &separate}) store->allocate(memory);
  stacked.initialize(3);
  // The same values, flat order being the same: the stack's experts, then the biases' rows.
  const Tensor stacked_values = stacked.flat_values();
  const Tensor separate_values = separate.flat_values();
  ASSERT_EQ(stacked_values.numel(), separate_values.numel());
  std::copy_n(stacked_values.data<float>(), stacked_values.numel(), separate_values.data<float>());
  const std::vector<optim::Segment> a = optim::whole_parameters(stacked), b = optim::whole_parameters(separate);
  std::unique_ptr<optim::Optimizer> on_stack = optim::make_optimizer(memory, c, stacked, a, nullptr);
  std::unique_ptr<optim::Optimizer> on_each = optim::make_optimizer(memory, c, separate, b, nullptr);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = stacked_values.numel();
  for (int step = 0; step < 4; ++step) {
    float* ga = a.front().grad;
    float* gb = b.front().grad;
    for (int64_t i = 0; i < n; ++i) {
      // Experts of very different scales: statistics mixed across them would show.
      const float scale = i < E * F * C ? std::pow(10.0f, float(i / (F * C))) : 1.0f;
      ga[i] = gb[i] = scale * normal(rng);
    }
    on_stack->step(1e-2f, a);
    on_each->step(1e-2f, b);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(stacked_values.data<float>()[i], separate_values.data<float>()[i]) << "element " << i;
  }
  // Each expert's R and C: E (F + C) floats for the stack, as for the separate matrices.
  EXPECT_EQ(optim::state_bytes(c, a), optim::state_bytes(c, b));
}

TEST(Optimizers, Adam8bitMatchesThePaper) {
  RefHyper h;
  h.lr = 1e-2;
  expect_matches<testing::RefAdam8bit>("adam8bit", h, 2e-6);
  h.linear = true;
  h.block = 256;
  expect_matches<testing::RefAdam8bit>("adam8bit", h, 2e-6);
}

TEST(Optimizers, AdamWMatchesThePaperWithAndWithoutAFrozenVariance) {
  RefHyper h;
  h.lr = 1e-2;
  expect_matches<testing::RefAdamW>("adamw", h, 2e-6, 8);
  h.variance_freeze = 3;
  expect_matches<testing::RefAdamW>("adamw", h, 2e-6, 8);
}

// With the variance frozen (and no momentum), Adam's update is linear in the gradient: two steps'
// gradients held back and sent as one sum in the second step move the weights exactly as far as
// each sent in its own step, which is what error feedback relies on. A live variance does not.
TEST(Optimizers, AFrozenVarianceMakesTheUpdateLinearInTheGradient) {
  const auto moved = [](int64_t freeze, bool deferred) {
    optim::OptimizerConfig c;
    c.weight_decay = 0.0f;
    c.beta1 = 0.0f;  // no momentum: the update is exactly lr · g / (√v̂ + ε)
    c.variance_freeze_step = freeze;
    MemoryAccountant memory;
    nn::ParameterStore store;
    store.declare("w", {4}, nn::ParameterRole::Bias, nn::Init::Zeros);
    store.allocate(memory);
    store.initialize(1);
    const std::vector<optim::Segment> segments = optim::whole_parameters(store);
    std::unique_ptr<optim::Optimizer> opt = optim::make_optimizer(memory, c, store, segments, nullptr);
    float* g = store.grad_of(store.all()[0]).data<float>();
    const auto step = [&](std::array<float, 4> grad) {
      std::copy(grad.begin(), grad.end(), g);
      opt->step(1e-2f, segments);
    };
    step({1.0f, -2.0f, 0.5f, 3.0f});  // step 1 sets v
    const std::array<float, 4> a{0.2f, 0.1f, -0.3f, 0.4f}, b{0.6f, -0.2f, 0.1f, 0.2f};
    if (deferred) {
      step({0, 0, 0, 0});
      step({a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]});
    } else {
      step(a);
      step(b);
    }
    const float* w = store.value(store.all()[0]).data<float>();
    return std::vector<float>(w, w + 4);
  };
  const std::vector<float> each = moved(1, false), summed = moved(1, true);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(each[i], summed[i], 1e-6f) << "element " << i;
  const std::vector<float> each_live = moved(0, false), summed_live = moved(0, true);
  double apart = 0;
  for (size_t i = 0; i < 4; ++i) apart = std::max(apart, double(std::abs(each_live[i] - summed_live[i])));
  EXPECT_GT(apart, 1e-4) << "with a live variance the two orders should move the weights differently";
}

TEST(Optimizers, CodebooksAreThePapersCodes) {
  for (bool linear : {false, true}) {
    for (bool is_signed : {false, true}) {
      const std::vector<float> code =
          optim::codebook(linear ? optim::Quantization::Linear : optim::Quantization::Dynamic, is_signed);
      const std::vector<double> want = testing::ref_codebook(linear, is_signed);
      ASSERT_EQ(code.size(), want.size());
      EXPECT_LE(code.size(), 256u);
      for (size_t i = 0; i < code.size(); ++i) EXPECT_EQ(code[i], static_cast<float>(want[i])) << i;
      EXPECT_TRUE(std::is_sorted(code.begin(), code.end()));
      EXPECT_EQ(code.back(), 1.0f);
      EXPECT_EQ(code[optim::nearest_code(code, 0.0f)], 0.0f);
    }
  }
  // The dynamic code is fine near zero, where moments mostly are: relative spacing within a decade.
  const std::vector<float> dynamic = optim::codebook(optim::Quantization::Dynamic, false);
  EXPECT_EQ(dynamic.size(), 256u);
  EXPECT_LT(dynamic[1], 1e-6f);
}

// What the allocator holds under the tag 'optimizer' equals the formula, for whole parameters and
// for a range cutting matrices and 8-bit blocks (a ZeRO shard).
TEST(Optimizers, StateBytesEqualTheFormula) {
  for (const std::string name : {"adamw", "sgd", "adafactor", "adam8bit", "lamb", "lars"}) {
    for (bool shard : {false, true}) {
      Model model;
      std::vector<optim::Segment> segments = optim::whole_parameters(model.store);
      const int64_t N = model.store.numel();
      if (shard) {
        // Elements [500, N - 700): the embedding's tail, the big matrix's middle blocks cut, ...
        segments = optim::segments_of_range(model.store, {500, N - 700},
                                            model.store.flat_values().data<float>() + 500,
                                            model.store.flat_grads().data<float>() + 500, 0);
      }
      optim::OptimizerConfig c;
      c.kind = optim::parse_optimizer_kind(name);
      c.momentum = 0.9f;
      c.first_moment = name == "adafactor" && shard;
      const size_t before = model.memory.stats().live_of(MemoryTag::Optimizer);
      std::unique_ptr<optim::Optimizer> opt = optim::make_optimizer(model.memory, c, model.store, segments, nullptr);
      const size_t held = model.memory.stats().live_of(MemoryTag::Optimizer) - before;
      EXPECT_EQ(static_cast<int64_t>(held), optim::state_bytes(c, segments)) << name << (shard ? " shard" : "");
    }
  }
  // The formulas themselves, on the model above (matrices 40×8 embedding, 64×80, 12×10; vectors 64, 80).
  Model model;
  const std::vector<optim::Segment> all = optim::whole_parameters(model.store);
  const int64_t N = model.store.numel();
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::Adafactor;
  EXPECT_EQ(optim::state_bytes(c, all), 4 * ((40 + 8) + (64 + 80) + 64 + 80 + (12 + 10)));
  c.kind = optim::OptimizerKind::Adam8bit;
  // The 64×80 matrix is the only one of 4096 elements or more that is not an embedding: 3 blocks.
  EXPECT_EQ(optim::state_bytes(c, all), 2 * 5120 + 8 * 3 + 8 * (N - 5120));
  c.kind = optim::OptimizerKind::Sgd;
  c.momentum = 0;
  EXPECT_EQ(optim::state_bytes(c, all), 0);
}

// A fresh optimizer loaded with another's state continues exactly as the other does.
TEST(Optimizers, StateDictResumesBitForBit) {
  for (const std::string name : {"adamw", "sgd", "adafactor", "adam8bit", "lamb", "lars"}) {
    RefHyper h;
    h.lr = name == "lars" ? 1.0 : 1e-2;
    optim::OptimizerConfig c = settings(name, h);
    c.first_moment = name == "adafactor";
    c.nesterov = name == "sgd";
    Model a, b;
    const std::vector<optim::Segment> sa = optim::whole_parameters(a.store), sb = optim::whole_parameters(b.store);
    auto oa = optim::make_optimizer(a.memory, c, a.store, sa, nullptr);
    for (int s = 0; s < 3; ++s) {
      a.draw_gradients(s);
      oa->step(0.01f, sa);
    }
    b.store.flat_values().copy_from(a.store.flat_values());
    auto ob = optim::make_optimizer(b.memory, c, b.store, sb, nullptr);
    ob->load_state_dict(oa->state_dict());
    EXPECT_EQ(ob->steps_taken(), 3);
    for (int s = 3; s < 5; ++s) {
      a.draw_gradients(s);
      b.draw_gradients(s);
      oa->step(0.01f, sa);
      ob->step(0.01f, sb);
    }
    const float* wa = a.store.flat_values().data<float>();
    const float* wb = b.store.flat_values().data<float>();
    EXPECT_EQ(0, std::memcmp(wa, wb, sizeof(float) * size_t(a.store.numel()))) << name;
  }
}

// The views an optimizer runs its ops on are the segment's own elements, and a segment without
// values or gradients (an offloaded shard's) gives none.
TEST(Optimizers, SegmentViewsAreTheSegmentsElements) {
  Model model;
  const nn::Parameter& fc = model.store.get("blocks.0.mlp.fc.weight");
  float* values = model.store.flat_values().data<float>();
  float* grads = model.store.flat_grads().data<float>();
  const std::vector<optim::Segment> segments =
      optim::segments_of_range(model.store, {static_cast<int64_t>(fc.offset) + 7, static_cast<int64_t>(fc.offset) + 100},
                               values + fc.offset + 7, grads + fc.offset + 7, 0);
  ASSERT_EQ(segments.size(), 1u);
  const Tensor v = segments[0].values(), g = segments[0].grads();
  EXPECT_EQ(v.shape(), Shape{93});
  EXPECT_EQ(g.shape(), Shape{93});
  EXPECT_EQ(v.dtype(), DType::F32);
  EXPECT_EQ(v.data<float>(), values + fc.offset + 7);
  EXPECT_EQ(g.data<float>(), grads + fc.offset + 7);
  const std::vector<optim::Segment> elsewhere = optim::segments_of_range(
      model.store, {static_cast<int64_t>(fc.offset), static_cast<int64_t>(fc.offset) + 10}, nullptr, nullptr, 0);
  ASSERT_EQ(elsewhere.size(), 1u);
  EXPECT_FALSE(elsewhere[0].values().defined());
  EXPECT_FALSE(elsewhere[0].grads().defined());
}

TEST(Optimizers, UnknownNameListsTheKnownOnes) {
  try {
    optim::parse_optimizer_kind("adagrad");
    FAIL() << "an unknown optimizer name was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw, sgd, adafactor, adam8bit, lamb, lars"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
