// The mixture-of-experts layer and a model built with it: parameters and memory equal the
// formulas, the routing honours the capacity, the layer's gradient (experts, router, the
// load-balancing and z losses, the dispatch and combine between them) equals finite differences,
// its backward split into input and weight halves (zero-bubble's B and W) gives the bits of the
// whole one, and under 16-bit compute the routing is the f32 routing of the same 16-bit values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/activation_bytes.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "nn/moe.h"

using namespace tessera;
using config::Architecture;
using config::ModelConfig;

namespace {

ModelConfig moe_config(Architecture arch, int top_k, float capacity_factor) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 29;
  c.seq_len = 12;
  c.ffn_hidden = 24;
  c.bias = arch == Architecture::Gpt2;
  c.moe_experts = 4;
  c.moe_top_k = top_k;
  c.moe_capacity_factor = capacity_factor;
  c.moe_aux_loss_coef = 0.1f;
  c.moe_z_loss_coef = 0.05f;
  return c;
}

// Each architecture with its own MLP, and with the other kind: the experts follow model.activation.
const std::pair<Architecture, std::optional<config::Activation>> kModels[] = {
    {Architecture::Gpt2, std::nullopt},
    {Architecture::Llama, std::nullopt},
    {Architecture::Gpt2, config::Activation::Swiglu},
    {Architecture::Llama, config::Activation::Relu2},
};

std::string describe(Architecture arch, const ModelConfig& c) {
  return config::architecture_name(arch) + " " + config::activation_name(c.mlp_activation());
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t stream) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    t[static_cast<size_t>(i)] = static_cast<int32_t>(uniform(9, stream, static_cast<uint64_t>(i)) * static_cast<float>(vocab));
  }
  return t;
}

// The 16-bit working copies of a store's parameters (what mixed precision's WorkingCopies answers),
// with the store's f32 gradients.
class SixteenBitCopies final : public nn::ParameterAccess {
 public:
  SixteenBitCopies(nn::ParameterStore& store, DType dtype, MemoryAccountant& mem) : store_(store) {
    for (const nn::Parameter& p : store.all()) {
      const Tensor source = store.weight(p);
      Tensor copy = Tensor::empty(source.shape(), dtype, MemoryTag::WorkingCopies, mem);
      round_into(copy, source);
      copies_.push_back(copy);
    }
  }
  Tensor weight(const nn::Parameter& p) override { return copies_[static_cast<size_t>(p.id)]; }
  Tensor grad(const nn::Parameter& p) override { return store_.grad(p); }

  // f32 `source` rounded into the 16-bit `copy`.
  static void round_into(const Tensor& copy, const Tensor& source) {
    const auto n = static_cast<size_t>(source.numel());
    if (copy.dtype() == DType::BF16) {
      convert_f32_to_bf16(copy.data<bf16>(), source.data<float>(), n);
    } else {
      convert_f32_to_f16(copy.data<f16>(), source.data<float>(), n);
    }
  }
  // `t` (f32) replaced by its values rounded to `dtype`.
  static void round_in_place(const Tensor& t, DType dtype, MemoryAccountant& mem) {
    Tensor half = Tensor::empty(t.shape(), dtype, MemoryTag::Workspace, mem);
    round_into(half, t);
    const auto n = static_cast<size_t>(t.numel());
    if (dtype == DType::BF16) {
      convert_bf16_to_f32(t.data<float>(), half.data<bf16>(), n);
    } else {
      convert_f16_to_f32(t.data<float>(), half.data<f16>(), n);
    }
  }

 private:
  nn::ParameterStore& store_;
  std::vector<Tensor> copies_;  // [parameter id]
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// ‖a − b‖ / ‖b‖ over the elements, a in any float dtype, b f32.
double relative_distance(const Tensor& a, const Tensor& b) {
  std::vector<float> wide(static_cast<size_t>(a.numel()));
  if (a.dtype() == DType::BF16) convert_bf16_to_f32(wide.data(), a.data<bf16>(), wide.size());
  if (a.dtype() == DType::F16) convert_f16_to_f32(wide.data(), a.data<f16>(), wide.size());
  if (a.dtype() == DType::F32) std::memcpy(wide.data(), a.data<float>(), a.nbytes());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < wide.size(); ++i) {
    const double d = double{wide[i]} - b.data<float>()[i];
    diff += d * d;
    norm += double{b.data<float>()[i]} * b.data<float>()[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST(Moe, ParametersAreStackedAndCounted) {
  for (const auto& [arch, activation] : kModels) {
    ModelConfig c = moe_config(arch, 2, 1.0f);
    c.activation = activation;
    c.moe_every = 2;  // block 1 only
    MemoryAccountant mem;
    nn::GPT model(c, mem, 1);
    EXPECT_EQ(model.parameters().numel(), c.parameter_count()) << describe(arch, c);
    const std::string fc = c.gated_mlp() ? "gate" : "fc";
    if (c.gated_mlp()) {
      EXPECT_NO_THROW(model.parameters().get("blocks.1.moe.experts.up.weight")) << describe(arch, c);
    } else {
      EXPECT_THROW(model.parameters().get("blocks.1.moe.experts.up.weight"), Error) << describe(arch, c);
    }
    EXPECT_EQ(model.parameters().get("blocks.1.moe.experts." + fc + ".weight").shape, (Shape{4, 24, 16}));
    EXPECT_EQ(model.parameters().get("blocks.1.moe.router.weight").shape, (Shape{4, 16}));
    EXPECT_THROW(model.parameters().get("blocks.1.mlp." + fc + ".weight"), Error);
    EXPECT_NO_THROW(model.parameters().get("blocks.0.mlp." + fc + ".weight"));
    // A token reads the router and k = 2 of the 4 experts.
    EXPECT_EQ(c.parameter_count() - c.active_parameter_count(), 2 * c.mlp_parameter_count());
  }
}

TEST(Moe, CapacityIsCountedPerMicrobatch) {
  ModelConfig c = moe_config(Architecture::Gpt2, 2, 1.25f);
  EXPECT_EQ(c.moe_capacity(24), 15);  // ceil(1.25 · 24 · 2 / 4)
  c.moe_capacity_factor = 100.0f;
  EXPECT_EQ(c.moe_capacity(24), 24);  // never more than the tokens
  c.moe_capacity_factor = 0.01f;
  EXPECT_EQ(c.moe_capacity(24), 1);
}

// The activation peak of a training step equals config::saved_activation_bytes, with tokens
// dropped or not, and the routing statistics add up: each expert within its capacity.
TEST(Moe, MeasuredMemoryAndRoutingEqualTheFormulas) {
  for (const auto& [arch, activation] : kModels) {
    for (int k : {1, 2}) {
      for (float capacity_factor : {0.5f, 2.0f}) {
        ModelConfig c = moe_config(arch, k, capacity_factor);
        c.activation = activation;
        MemoryAccountant mem;
        nn::GPT model(c, mem, 1);
        const int B = 2, T = 11;
        const auto tokens = random_tokens(B * T, c.vocab_size, 1), targets = random_tokens(B * T, c.vocab_size, 2);
        mem.reset_peaks();
        nn::MoeStatistics stats;
        nn::StepContext step{mem, model.parameters()};
        step.moe_statistics = &stats;
        nn::GPT::Ctx ctx;
        model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f / (B * T));
        const auto saved = static_cast<size_t>(config::saved_activation_bytes(c, B, T));
        EXPECT_EQ(mem.stats().live_of(MemoryTag::Activations), saved);
        model.backward(step, ctx);
        EXPECT_EQ(mem.stats().peak_of(MemoryTag::Activations), saved);
        EXPECT_EQ(mem.stats().live_of(MemoryTag::Activations), 0u);
        EXPECT_EQ(mem.stats().live_of(MemoryTag::Workspace), 0u);

        const int64_t capacity = c.moe_capacity(B * T);
        EXPECT_EQ(stats.routings, c.n_layer);
        EXPECT_EQ(stats.assignments, int64_t{c.n_layer} * B * T * k);
        int64_t kept = 0;
        for (int64_t load : stats.load) {
          EXPECT_LE(load, c.n_layer * capacity);
          kept += load;
        }
        EXPECT_EQ(kept + stats.dropped, stats.assignments);
        if (capacity * c.moe_experts < int64_t{B} * T * k) {
          EXPECT_GT(stats.dropped, 0) << "capacity " << capacity << " for " << B * T * k << " choices";
        }
        EXPECT_GT(stats.aux_loss_sum, 0.0);
        EXPECT_GT(stats.z_loss_sum, 0.0);
      }
    }
  }
}

// L = Σ y·g + grad_scale·N·(aux_coef·aux + z_coef·z): its gradient with respect to the input, the
// router and every expert weight against central differences along random directions (f32, so
// a loose tolerance; a wrong term is off by far more).
TEST(Moe, LayerGradientMatchesFiniteDifferences) {
  for (const auto& [arch, activation] : kModels) {
    for (int k : {1, 2}) {
      ModelConfig c = moe_config(arch, k, 0.75f);  // tight: some choices drop
      c.activation = activation;
      nn::ParameterStore store;
      nn::MoeFeedForward layer(store, "moe", c);
      MemoryAccountant mem;
      store.allocate(mem);
      store.initialize(3);
      // Larger weights than GPT-2's init, so every part of the layer moves the objective.
      float* w = store.flat_values().data<float>();
      for (int64_t i = 0; i < store.numel(); ++i) w[i] = 0.3f * normal(4, 1, static_cast<uint64_t>(i));
      const int64_t B = 2, T = 7, C = c.n_embd, N = B * T;
      Tensor x = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
      Tensor g = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
      for (int64_t i = 0; i < x.numel(); ++i) {
        x.data<float>()[i] = normal(5, 1, static_cast<uint64_t>(i));
        g.data<float>()[i] = normal(5, 2, static_cast<uint64_t>(i));
      }
      const float grad_scale = 0.5f;
      auto objective = [&](const Tensor& input) {
        nn::MoeStatistics stats;
        nn::StepContext step{mem, store};
        step.grad_scale = grad_scale;
        step.moe_statistics = &stats;
        nn::MoeFeedForward::Ctx ctx;
        const Tensor y = layer.forward(step, ctx, input);
        double sum = 0;
        for (int64_t i = 0; i < y.numel(); ++i) sum += double{y.data<float>()[i]} * g.data<float>()[i];
        return sum + grad_scale * N * (c.moe_aux_loss_coef * stats.aux_loss_sum + c.moe_z_loss_coef * stats.z_loss_sum);
      };
      store.zero_grads();
      Tensor dx;
      {
        nn::StepContext step{mem, store};
        step.grad_scale = grad_scale;
        nn::MoeFeedForward::Ctx ctx;
        layer.forward(step, ctx, x);
        dx = layer.backward(step, ctx, g, nn::BackwardPart::Both);
      }
      const float* grads = store.flat_grads().data<float>();
      for (int dir = 0; dir < 3; ++dir) {
        // Perturb x and every parameter together along a random direction.
        std::vector<float> vx(static_cast<size_t>(x.numel())), vw(static_cast<size_t>(store.numel()));
        double predicted = 0;
        for (size_t i = 0; i < vx.size(); ++i) {
          vx[i] = normal(6, static_cast<uint64_t>(dir), i);
          predicted += double{vx[i]} * dx.data<float>()[i];
        }
        for (size_t i = 0; i < vw.size(); ++i) {
          vw[i] = normal(7, static_cast<uint64_t>(dir), i);
          predicted += double{vw[i]} * grads[i];
        }
        const float h = 1e-3f;
        std::vector<float> w0(w, w + store.numel());
        Tensor xp = Tensor::empty(x.shape(), DType::F32, MemoryTag::Activations, mem);
        auto at = [&](float t) {
          for (size_t i = 0; i < vw.size(); ++i) w[i] = w0[i] + t * vw[i];
          for (size_t i = 0; i < vx.size(); ++i) xp.data<float>()[i] = x.data<float>()[i] + t * vx[i];
          return objective(xp);
        };
        const double numeric = (at(h) - at(-h)) / (2.0 * h);
        std::copy(w0.begin(), w0.end(), w);
        EXPECT_NEAR(numeric, predicted, 2e-2 * std::max(1.0, std::fabs(predicted)))
            << describe(arch, c) << " k " << k << " direction " << dir;
      }
      // A term left out of the backward is caught: the aux and z losses matter at these weights.
      EXPECT_GT(c.moe_aux_loss_coef, 0.0f);
    }
  }
}

// Under bf16 and fp16 compute the router runs in f32 on its 16-bit input and weight copy: its
// probabilities, choices, slots and gates are bitwise those of the f32 layer fed the same rounded
// values (a router that rounded its logits to 16 bits would differ), while the experts run in 16
// bits: the output and every gradient near the f32 layer's, within a few 16-bit roundings.
TEST(Moe, SixteenBitComputeRoutesAsF32OnTheSameValues) {
  for (const DType dtype : {DType::BF16, DType::F16}) {
    for (int k : {1, 2}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " top-" + std::to_string(k));
      const ModelConfig c = moe_config(Architecture::Llama, k, 0.75f);
      nn::ParameterStore store;
      nn::MoeFeedForward layer(store, "moe", c);
      MemoryAccountant mem;
      store.allocate(mem);
      store.initialize(3);
      float* w = store.flat_values().data<float>();
      for (int64_t i = 0; i < store.numel(); ++i) w[i] = 0.3f * normal(4, 1, static_cast<uint64_t>(i));
      SixteenBitCopies::round_in_place(store.flat_values(), dtype, mem);
      SixteenBitCopies copies(store, dtype, mem);
      const int64_t B = 2, T = 7, C = c.n_embd;
      Tensor x = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
      Tensor g = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
      for (int64_t i = 0; i < x.numel(); ++i) {
        x.data<float>()[i] = normal(5, 1, static_cast<uint64_t>(i));
        g.data<float>()[i] = normal(5, 2, static_cast<uint64_t>(i));
      }
      SixteenBitCopies::round_in_place(x, dtype, mem);
      SixteenBitCopies::round_in_place(g, dtype, mem);
      Tensor x16 = Tensor::empty(x.shape(), dtype, MemoryTag::Activations, mem);
      Tensor g16 = Tensor::empty(g.shape(), dtype, MemoryTag::Activations, mem);
      SixteenBitCopies::round_into(x16, x);
      SixteenBitCopies::round_into(g16, g);

      store.zero_grads();
      nn::StepContext step32{mem, store};
      nn::MoeFeedForward::Ctx ctx32;
      const Tensor y32 = layer.forward(step32, ctx32, x);
      const nn::MoeFeedForward::Ctx routed32 = ctx32;
      const Tensor dx32 = layer.backward(step32, ctx32, g, nn::BackwardPart::Both);
      const std::vector<float> grads32(store.flat_grads().data<float>(),
                                       store.flat_grads().data<float>() + store.numel());

      store.zero_grads();
      nn::StepContext step16{mem, copies};
      step16.compute = dtype;
      nn::MoeFeedForward::Ctx ctx16;
      const Tensor y16 = layer.forward(step16, ctx16, x16);
      EXPECT_TRUE(same_bits(ctx16.probs, routed32.probs) && same_bits(ctx16.lse, routed32.lse));
      EXPECT_TRUE(same_bits(ctx16.choice, routed32.choice) && same_bits(ctx16.slot, routed32.slot));
      EXPECT_TRUE(same_bits(ctx16.gate, routed32.gate));
      EXPECT_EQ(ctx16.in.dtype(), dtype);
      EXPECT_EQ(ctx16.returned.dtype(), dtype);
      const Tensor dx16 = layer.backward(step16, ctx16, g16, nn::BackwardPart::Both);
      EXPECT_EQ(y16.dtype(), dtype);
      EXPECT_EQ(dx16.dtype(), dtype);
      // bf16 rounds to 2^-9 relative, fp16 to 2^-12; a few roundings along the way.
      const double bound = dtype == DType::BF16 ? 2e-2 : 3e-3;
      EXPECT_LE(relative_distance(y16, y32), bound);
      EXPECT_LE(relative_distance(dx16, dx32), bound);
      for (const nn::Parameter& p : store.all()) {
        float* first = const_cast<float*>(grads32.data()) + p.offset;
        EXPECT_LE(relative_distance(store.grad(p), Tensor::from_external(first, p.shape, DType::F32)), bound) << p.name;
      }
    }
  }
}

// Split as ZB-H1 runs it, the layer's backward gives the bits of the whole one: the input half
// returns the same dx and writes no parameter gradient (every one of the layer's is a weight
// half's: the experts' matrices and biases and the router's matrix), keeping the experts' rows' input
// and activation, E·capacity rows of C + F values (config::unit_activation_bytes' weight half) and
// nothing else of the forward's; the weight half then accumulates the same gradients. In f32 and
// in bf16 (the router's f32 copies of its input and weight), with tokens dropped, onto gradients
// that already hold a microbatch's.
TEST(Moe, SplitBackwardGivesTheBitsOfTheWholeOne) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const auto& [arch, activation] : kModels) {
      for (int k : {1, 2}) {
        ModelConfig c = moe_config(arch, k, 0.75f);
        c.activation = activation;
        SCOPED_TRACE(describe(arch, c) + " top-" + std::to_string(k) + " " + std::string(dtype_name(dtype)));
        nn::ParameterStore store;
        nn::MoeFeedForward layer(store, "moe", c);
        MemoryAccountant mem;
        store.allocate(mem);
        store.initialize(3);
        float* w = store.flat_values().data<float>();
        for (int64_t i = 0; i < store.numel(); ++i) w[i] = 0.3f * normal(4, 1, static_cast<uint64_t>(i));
        std::optional<SixteenBitCopies> copies;
        if (dtype != DType::F32) copies.emplace(store, dtype, mem);
        nn::ParameterAccess& params = copies ? static_cast<nn::ParameterAccess&>(*copies) : store;
        const int64_t B = 2, T = 7, C = c.n_embd;
        Tensor x32 = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
        Tensor g32 = Tensor::empty({B, T, C}, DType::F32, MemoryTag::Activations, mem);
        for (int64_t i = 0; i < x32.numel(); ++i) {
          x32.data<float>()[i] = normal(5, 1, static_cast<uint64_t>(i));
          g32.data<float>()[i] = normal(5, 2, static_cast<uint64_t>(i));
        }
        Tensor x = x32, g = g32;
        if (dtype != DType::F32) {
          x = Tensor::empty(x32.shape(), dtype, MemoryTag::Activations, mem);
          g = Tensor::empty(g32.shape(), dtype, MemoryTag::Activations, mem);
          SixteenBitCopies::round_into(x, x32);
          SixteenBitCopies::round_into(g, g32);
        }
        // Gradients as an earlier microbatch left them.
        const Tensor grads = store.flat_grads();
        std::vector<float> earlier(static_cast<size_t>(store.numel()));
        for (size_t i = 0; i < earlier.size(); ++i) earlier[i] = 0.01f * normal(8, 1, i);
        const auto reset_grads = [&] { std::copy(earlier.begin(), earlier.end(), grads.data<float>()); };
        const auto grads_now = [&] { return std::vector<float>(grads.data<float>(), grads.data<float>() + store.numel()); };

        reset_grads();
        nn::StepContext step{mem, params};
        step.compute = dtype;
        step.grad_scale = 0.5f;
        nn::MoeFeedForward::Ctx whole_ctx;
        layer.forward(step, whole_ctx, x);
        const Tensor dx_whole = layer.backward(step, whole_ctx, g, nn::BackwardPart::Both);
        const std::vector<float> whole = grads_now();

        reset_grads();
        const size_t before = mem.stats().live_of(MemoryTag::Activations);
        nn::MoeFeedForward::Ctx ctx;
        layer.forward(step, ctx, x);
        const Tensor dx = layer.backward(step, ctx, g, nn::BackwardPart::Input);
        EXPECT_TRUE(same_bits(dx, dx_whole));
        EXPECT_TRUE(grads_now() == earlier) << "the input half wrote a parameter gradient";
        const int64_t expert_rows = c.moe_experts * c.moe_capacity(B * T);
        EXPECT_EQ(mem.stats().live_of(MemoryTag::Activations) - before,
                  static_cast<size_t>(expert_rows * (C + c.ffn()) * static_cast<int64_t>(dtype_size(dtype))));
        EXPECT_FALSE(layer.backward(step, ctx, Tensor(), nn::BackwardPart::Weight).defined());
        EXPECT_EQ(mem.stats().live_of(MemoryTag::Activations), before);
        const std::vector<float> split = grads_now();
        EXPECT_TRUE(std::memcmp(split.data(), whole.data(), split.size() * sizeof(float)) == 0);
        for (const nn::Parameter& p : store.all()) {
          const auto first = static_cast<size_t>(p.offset), last = first + static_cast<size_t>(p.numel());
          EXPECT_FALSE(std::equal(whole.begin() + first, whole.begin() + last, earlier.begin() + first))
              << p.name << ": the backward left its gradient as it found it";
        }
      }
    }
  }
}
