// Weight decay and trust ratios follow the role each parameter is declared with (nn::ParameterRole),
// not its number of dimensions: in every model — GPT-2 and Llama, dense and MoE, with biases —
// every bias (an MoE layer's stacked [E, F] expert biases among them) and every norm gain keeps its
// value under every optimizer when its gradient is zero, while the weights decay.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/model_config.h"
#include "nn/gpt.h"
#include "optim/make_optimizer.h"

namespace tessera {
namespace {

config::ModelConfig model(config::Architecture arch, int experts) {
  config::ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 32;
  c.seq_len = 8;
  c.bias = true;
  c.moe_experts = experts;
  c.moe_top_k = experts > 0 ? 2 : 1;
  return c;
}

// The role a parameter's name says it has: the check on the declarations themselves.
nn::ParameterRole role_by_name(const std::string& name) {
  if (name.ends_with(".bias")) return nn::ParameterRole::Bias;
  if (name.find("norm") != std::string::npos) return nn::ParameterRole::NormGain;
  return nn::ParameterRole::Weight;
}

TEST(WeightDecayRoles, NoBiasOrNormGainIsDecayedInAnyModelByAnyOptimizer) {
  for (config::Architecture arch : {config::Architecture::Gpt2, config::Architecture::Llama}) {
    for (int experts : {0, 4}) {
      for (const char* name : {"adamw", "sgd", "adafactor", "adam8bit", "lamb", "lars"}) {
        SCOPED_TRACE(config::architecture_name(arch) + (experts ? " moe " : " dense ") + name);
        MemoryAccountant memory;
        nn::GPT gpt(model(arch, experts), memory, 7);
        nn::ParameterStore& store = gpt.parameters();
        bool stacked_expert_bias = false;
        for (const nn::Parameter& p : store.all()) {
          EXPECT_EQ(p.role, role_by_name(p.name)) << p.name;
          stacked_expert_bias = stacked_expert_bias || (p.role == nn::ParameterRole::Bias && p.shape.size() == 2);
        }
        EXPECT_EQ(stacked_expert_bias, experts > 0) << "the MoE experts' biases are [E, F] and [E, C]";
        // Biases start at zero: give every parameter a value for decay to act on.
        float* values = store.flat_values().data<float>();
        for (int64_t i = 0; i < store.numel(); ++i) values[i] = 0.5f + 0.001f * static_cast<float>(i % 97);
        store.zero_grads();
        const std::vector<float> before(values, values + store.numel());
        optim::OptimizerConfig config;
        config.kind = optim::parse_optimizer_kind(name);
        config.weight_decay = 0.1f;
        const std::vector<optim::Segment> segments = optim::segments_of_range(
            store, {0, store.numel()}, values, store.flat_grads().data<float>(), 0);
        std::unique_ptr<optim::Optimizer> optimizer = optim::make_optimizer(memory, config, store, segments, nullptr);
        optimizer->step(0.1f, segments);
        for (const nn::Parameter& p : store.all()) {
          bool changed = false;
          for (int64_t i = 0; i < p.numel(); ++i) {
            const size_t at = p.offset + static_cast<size_t>(i);
            changed = changed || values[at] != before[at];
          }
          if (p.role == nn::ParameterRole::Weight) {
            EXPECT_TRUE(changed) << p.name << " is a weight and was not decayed";
          } else {
            EXPECT_FALSE(changed) << p.name << " is not a weight and changed with a zero gradient";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
