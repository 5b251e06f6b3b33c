#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "config/activation_bytes.h"
#include "nn/gpt.h"
#include "optim/adamw.h"

using namespace tessera;
using config::Architecture;
using config::ModelConfig;

namespace {

ModelConfig small_config(Architecture arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.vocab_size = 61;
  c.seq_len = 24;
  c.bias = arch == Architecture::Gpt2;
  return c;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t stream) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(uniform(5, stream, static_cast<uint64_t>(i)) * static_cast<float>(vocab));
  return t;
}

// One optimizer step on a fixed batch; returns the mean loss.
double train_step(nn::GPT& model, optim::AdamW& opt, MemoryAccountant& mem, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& targets, int B, int T) {
  nn::StepContext step{mem, model.parameters()};
  nn::GPT::Ctx ctx;
  model.parameters().zero_grads();
  double sum = model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f / static_cast<float>(B * T));
  model.backward(step, ctx);
  opt.step(1e-3f, optim::whole_parameters(model.parameters()));
  return sum / (B * T);
}

}  // namespace

TEST(GPT, ParametersAreNamedAndCounted) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    for (bool tied : {true, false}) {
      ModelConfig c = small_config(arch);
      c.tied_embeddings = tied;
      MemoryAccountant mem;
      nn::GPT model(c, mem, 1);
      EXPECT_EQ(model.parameters().numel(), c.parameter_count());
      EXPECT_EQ(model.parameters().get("blocks.1.attn.qkv.weight").shape, (Shape{96, 32}));
      // Grouped-query attention: q 32 rows, k and v 8 each (1 key/value head of D = 8).
      ModelConfig gqa = c;
      gqa.n_kv_head = 1;
      nn::GPT grouped(gqa, mem, 1);
      EXPECT_EQ(grouped.parameters().numel(), gqa.parameter_count());
      EXPECT_EQ(grouped.parameters().get("blocks.1.attn.qkv.weight").shape, (Shape{48, 32}));
      EXPECT_EQ(model.parameters().get("embed.tokens.weight").shape, (Shape{61, 32}));
      if (!tied) {
        EXPECT_EQ(model.parameters().get("head.weight").shape, (Shape{61, 32}));
      }
      EXPECT_THROW(model.parameters().get("blocks.2.attn.qkv.weight"), Error);
    }
  }
}

// model.activation picks the MLP's shape whatever the architecture: ungated fc and proj of 4C, or
// SwiGLU's gate, up and down of ~8C/3; the count and ffn() follow it.
TEST(GPT, TheActivationSetsTheMlpOnEitherArchitecture) {
  using config::Activation;
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    for (Activation a : {Activation::Gelu, Activation::Relu, Activation::Relu2, Activation::Swiglu}) {
      ModelConfig c = small_config(arch);
      c.activation = a;
      MemoryAccountant mem;
      nn::GPT model(c, mem, 1);
      const std::string what = config::architecture_name(arch) + " " + config::activation_name(a);
      EXPECT_EQ(model.parameters().numel(), c.parameter_count()) << what;
      if (a == Activation::Swiglu) {
        EXPECT_EQ(c.ffn(), 128) << what;  // 8·32/3 = 85, rounded up to 64
        EXPECT_EQ(model.parameters().get("blocks.0.mlp.gate.weight").shape, (Shape{128, 32})) << what;
        EXPECT_EQ(model.parameters().get("blocks.0.mlp.up.weight").shape, (Shape{128, 32})) << what;
        EXPECT_EQ(model.parameters().get("blocks.0.mlp.down.weight").shape, (Shape{32, 128})) << what;
        EXPECT_THROW(model.parameters().get("blocks.0.mlp.fc.weight"), Error) << what;
      } else {
        EXPECT_EQ(c.ffn(), 128) << what;  // 4C
        EXPECT_EQ(model.parameters().get("blocks.0.mlp.fc.weight").shape, (Shape{128, 32})) << what;
        EXPECT_EQ(model.parameters().get("blocks.0.mlp.proj.weight").shape, (Shape{32, 128})) << what;
        EXPECT_THROW(model.parameters().get("blocks.0.mlp.gate.weight"), Error) << what;
      }
    }
  }
}

// The same model with another activation computes another function: the activation is applied,
// not only named. Unset is the architecture's own, bit for bit.
TEST(GPT, EachActivationGivesItsOwnLossAndUnsetIsTheArchitecturesOwn) {
  using config::Activation;
  const int B = 2, T = 9;
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    auto tokens = random_tokens(B * T, 61, 1);
    auto targets = random_tokens(B * T, 61, 2);
    auto loss_of = [&](std::optional<Activation> a) {
      ModelConfig c = small_config(arch);
      c.activation = a;
      MemoryAccountant mem;
      nn::GPT model(c, mem, 1);
      nn::StepContext step{mem, model.parameters()};
      nn::GPT::Ctx ctx;
      return model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f);
    };
    const double own = loss_of(std::nullopt);
    EXPECT_EQ(own, loss_of(config::default_activation(arch)));
    std::vector<double> losses;
    for (Activation a : {Activation::Gelu, Activation::Relu, Activation::Relu2}) losses.push_back(loss_of(a));
    EXPECT_NE(losses[0], losses[1]);
    EXPECT_NE(losses[1], losses[2]);
    EXPECT_NE(losses[0], losses[2]);
  }
}

// Counted memory equals the shapes' arithmetic: params/grads/optimizer 4/4/8 bytes per parameter
// in fp32, and the activation peak of a training step equals config::saved_activation_bytes.
TEST(GPT, MeasuredMemoryEqualsTheFormulas) {
  for (int kv_heads : {0, 2}) {  // multi-head, and grouped-query attention with 2 key/value heads
    for (auto [arch, activation] : {std::pair{Architecture::Gpt2, config::Activation::Gelu},
                                    std::pair{Architecture::Llama, config::Activation::Swiglu},
                                    std::pair{Architecture::Gpt2, config::Activation::Relu2},
                                    std::pair{Architecture::Gpt2, config::Activation::Swiglu},
                                    std::pair{Architecture::Llama, config::Activation::Relu}}) {
      ModelConfig c = small_config(arch);
      c.n_kv_head = kv_heads;
      c.activation = activation;
      MemoryAccountant mem;
      nn::GPT model(c, mem, 1);
      optim::AdamW opt(mem, {}, model.parameters().numel());
      const auto n = static_cast<size_t>(c.parameter_count());
      // The gradients come on first use (a ZeRO-2/3 reducer takes them over before any).
      EXPECT_EQ(mem.stats().live_of(MemoryTag::Grads), 0u);
      model.parameters().zero_grads();
      MemoryStats s = mem.stats();
      EXPECT_EQ(s.live_of(MemoryTag::Params), 4 * n);
      EXPECT_EQ(s.live_of(MemoryTag::Grads), 4 * n);
      EXPECT_EQ(s.live_of(MemoryTag::Optimizer), 8 * n);

      const int B = 3, T = 17;
      auto tokens = random_tokens(B * T, c.vocab_size, 1);
      auto targets = random_tokens(B * T, c.vocab_size, 2);
      mem.reset_peaks();
      nn::StepContext step{mem, model.parameters()};
      nn::GPT::Ctx ctx;
      model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f);
      EXPECT_EQ(mem.stats().live_of(MemoryTag::Activations), static_cast<size_t>(config::saved_activation_bytes(c, B, T)));
      model.backward(step, ctx);
      s = mem.stats();
      EXPECT_EQ(s.peak_of(MemoryTag::Activations), static_cast<size_t>(config::saved_activation_bytes(c, B, T)))
          << config::architecture_name(arch);
      EXPECT_EQ(s.live_of(MemoryTag::Activations), 0u) << "backward must release everything forward saved";
      EXPECT_EQ(s.live_of(MemoryTag::Workspace), 0u);
    }
  }
}

TEST(GPT, SameSeedGivesBitwiseEqualRuns) {
  ModelConfig c = small_config(Architecture::Gpt2);
  c.dropout = 0.1f;  // dropout masks come from the counter RNG, so they repeat too
  const int B = 2, T = 24;
  auto tokens = random_tokens(B * T, c.vocab_size, 3);
  auto targets = random_tokens(B * T, c.vocab_size, 4);
  std::vector<double> losses[2];
  std::vector<float> params[2];
  for (int run = 0; run < 2; ++run) {
    MemoryAccountant mem;
    nn::GPT model(c, mem, 1234);
    optim::AdamW opt(mem, {}, model.parameters().numel());
    for (int s = 0; s < 3; ++s) losses[run].push_back(train_step(model, opt, mem, tokens, targets, B, T));
    const float* p = model.parameters().flat_values().data<float>();
    params[run].assign(p, p + model.parameters().numel());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0);
  EXPECT_LT(losses[0][2], losses[0][0]) << "three steps on one batch must lower its loss";
  // A different seed gives a different model.
  MemoryAccountant mem;
  nn::GPT other(c, mem, 1235);
  EXPECT_NE(other.parameters().flat_values().data<float>()[0], params[0][0]);
}

TEST(GPT, BadInputGivesClearErrors) {
  ModelConfig c = small_config(Architecture::Gpt2);
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  nn::StepContext step{mem, model.parameters()};
  const int B = 1, T = 4;
  std::vector<int32_t> tokens = {1, 2, 61, 3};  // 61 is outside the vocabulary [0, 61)
  std::vector<int32_t> targets = {1, 2, 3, 4};
  {
    nn::GPT::Ctx ctx;
    try {
      model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f);
      FAIL() << "an out-of-range token must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("61"), std::string::npos) << e.what();
    }
  }
  {
    nn::GPT::Ctx ctx;
    std::vector<int32_t> long_tokens(30, 1);
    EXPECT_THROW(model.forward(step, ctx, long_tokens.data(), long_tokens.data(), 1, 30, 1.0f), Error);
  }
  {
    tokens[2] = 5;
    targets[1] = 70;  // target outside the vocabulary
    nn::GPT::Ctx ctx;
    EXPECT_THROW(model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f), Error);
  }
  {
    // A budget too small for the activations of a step names the tag and the budget.
    MemoryAccountant small;
    nn::GPT m2(c, small, 1);
    small.set_budget(small.stats().live_total + 4096);
    nn::StepContext s2{small, m2.parameters()};
    nn::GPT::Ctx ctx;
    targets[1] = 3;
    try {
      m2.forward(s2, ctx, tokens.data(), targets.data(), B, T, 1.0f);
      FAIL() << "the budget must be enforced";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
      EXPECT_NE(m.find("'activations'"), std::string::npos) << m;
    }
  }
  {
    ModelConfig bad = c;
    bad.n_head = 5;
    EXPECT_THROW(nn::GPT(bad, mem, 1), Error);
  }
}

// Transforms see the model as a chain of units whose owned parameters tile the flat buffer.
TEST(GPT, UnitsTileTheParameters) {
  ModelConfig c = small_config(Architecture::Gpt2);
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  const auto& units = model.units();
  ASSERT_EQ(units.size(), static_cast<size_t>(c.n_layer + 2));
  int64_t next = 0;
  for (const auto& u : units) {
    EXPECT_EQ(u.owned.begin, next) << u.name;
    next = u.owned.end;
  }
  EXPECT_EQ(next, model.parameters().numel());
  EXPECT_EQ(units.back().params.size(), 2u) << "a tied head also reads the token embedding";
  EXPECT_EQ(units.front().kind, nn::UnitKind::Embedding);
  EXPECT_EQ(units[1].kind, nn::UnitKind::Block);
  EXPECT_EQ(units.back().kind, nn::UnitKind::Head);
}

// A model whose values are never made whole (ZeRO-3's shard in the nvme tier makes them one
// parameter at a time): no buffer of the whole values, nothing in compute memory, and every
// parameter's initial values, asked for in any piece, the bits a model built whole holds.
TEST(GPT, DeferredValuesAreMadeOnDemandWithTheWholeModelsBits) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    SCOPED_TRACE(config::architecture_name(arch));
    MemoryAccountant whole_memory, deferred_memory;
    nn::GPT whole(small_config(arch), whole_memory, 7);
    nn::GPT deferred(small_config(arch), deferred_memory, 7, nullptr, /*deferred_values=*/true);
    EXPECT_FALSE(deferred.parameters().holds_values());
    EXPECT_EQ(deferred_memory.stats().live_of(MemoryTag::Params), 0u);
    EXPECT_THROW(deferred.parameters().flat_values(), Error);
    for (const nn::Parameter& p : whole.parameters().all()) {
      const nn::Parameter& q = deferred.parameters().get(p.name);
      const float* expected = whole.parameters().value(p).data<float>();
      // In two pieces, as a shard boundary may cut it.
      const int64_t cut = p.numel() / 3;
      std::vector<float> made(static_cast<size_t>(p.numel()));
      deferred.parameters().initial_values(q, 0, cut, made.data());
      deferred.parameters().initial_values(q, cut, p.numel(), made.data() + cut);
      EXPECT_EQ(std::memcmp(made.data(), expected, sizeof(float) * made.size()), 0) << p.name;
    }
    std::vector<float> one(1);
    EXPECT_THROW(whole.parameters().initial_values(whole.parameters().all().front(), 0, 1, one.data()), Error);
  }
}
