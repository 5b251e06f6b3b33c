// Generation: decoding with the key/value cache gives the tokens of rerunning the whole context,
// for GPT-2 and Llama, greedy and sampled, across context slides and with a prompt longer than the
// context; generation stops at the end-of-sequence token; bad options are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "../common/random_weights.h"
#include "train/sampler.h"

using namespace tessera;
using config::Architecture;

namespace {

config::ModelConfig small_config(Architecture arch) {
  config::ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.vocab_size = 97;
  c.seq_len = 16;
  c.bias = arch == Architecture::Gpt2;
  c.tied_embeddings = arch == Architecture::Gpt2;
  return c;
}

struct Model {
  explicit Model(Architecture arch) : model(small_config(arch), memory, 1) {
    tessera::testing::randomize_weights(model.parameters(), 4, 0.3);
  }
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, train::SamplingOptions o) {
    return train::generate(model, memory, model.parameters(), prompt, o);
  }
  MemoryAccountant memory;
  nn::GPT model;
};

void expect_cached_equals_uncached(Architecture arch) {
  Model m(arch);
  const int T = m.model.config().seq_len;
  const std::vector<std::vector<int32_t>> prompts = {{5}, {1, 2, 3, 4, 5, 6, 7}, std::vector<int32_t>(T + 5, 11)};
  for (const auto& prompt : prompts) {
    for (float temperature : {0.0f, 0.8f, 1.5f}) {
      for (int top_k : {0, 5}) {
        train::SamplingOptions o;
        o.max_new_tokens = 3 * T + 2;  // several restarts of the context
        o.temperature = temperature;
        o.top_k = top_k;
        o.seed = 17;
        // Both windows; Slide (a window moving by one token) only once, as it reruns seq_len per token.
        o.window = temperature == 0.8f && top_k == 5 ? train::ContextWindow::Slide : train::ContextWindow::Halve;
        const std::vector<int32_t> cached = m.generate(prompt, o);
        o.kv_cache = false;
        const std::vector<int32_t> uncached = m.generate(prompt, o);
        ASSERT_EQ(cached.size(), prompt.size() + o.max_new_tokens);
        EXPECT_EQ(cached, uncached) << "prompt of " << prompt.size() << " tokens, temperature " << temperature
                                    << ", top_k " << top_k;
        if (o.window == train::ContextWindow::Slide) {
          o.window = train::ContextWindow::Halve;
          EXPECT_NE(m.generate(prompt, o), uncached) << "the two windows see other contexts past seq_len";
        }
      }
    }
  }
}

}  // namespace

TEST(Sampler, CachedAndUncachedGiveTheSameTokensGpt2) { expect_cached_equals_uncached(Architecture::Gpt2); }
TEST(Sampler, CachedAndUncachedGiveTheSameTokensLlama) { expect_cached_equals_uncached(Architecture::Llama); }

TEST(Sampler, TemperatureZeroIsGreedy) {
  Model m(Architecture::Llama);
  train::SamplingOptions o;
  o.max_new_tokens = 15;  // within the context: each token is the argmax of logits() over all before it
  o.temperature = 0.0f;
  const std::vector<int32_t> a = m.generate({3}, o);
  o.seed = 99;  // the seed does not matter to greedy decoding
  EXPECT_EQ(m.generate({3}, o), a);
  // Each token is the argmax of the whole-context logits.
  nn::StepContext step{m.memory, m.model.parameters()};
  step.training = false;
  for (size_t n = 1; n < a.size(); ++n) {
    const Tensor logits = m.model.logits(step, a.data(), 1, static_cast<int>(n));
    const float* last = logits.data<float>() + (n - 1) * 97;
    EXPECT_EQ(a[n], std::max_element(last, last + 97) - last) << "token " << n;
  }
  // Sampling with a temperature gives other text.
  o.temperature = 1.0f;
  EXPECT_NE(m.generate({3}, o), a);
}

TEST(Sampler, StopsAtTheEndOfSequenceToken) {
  Model m(Architecture::Gpt2);
  train::SamplingOptions o;
  o.max_new_tokens = 30;
  o.temperature = 0.0f;
  const std::vector<int32_t> all = m.generate({2}, o);
  // Make the third generated token the end of sequence: generation ends with it.
  o.eos_id = all[3];
  const size_t first = std::find(all.begin() + 1, all.end(), o.eos_id) - all.begin();
  const std::vector<int32_t> stopped = m.generate({2}, o);
  EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), all.begin() + static_cast<long>(first) + 1));
  EXPECT_EQ(stopped.back(), o.eos_id);
}

TEST(Sampler, BadOptionsAreRefusedByName) {
  Model m(Architecture::Gpt2);
  struct Case {
    train::SamplingOptions options;
    std::string message;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {{-1, 0.8f, 40}, "--tokens = -1 must be between 0 and 1000000"},
      {{train::kMaxSampleTokens + 1, 0.8f, 40}, "--tokens = 1000001 must be between 0 and 1000000"},
      {{10, -0.5f, 40}, "--temperature = -0.5 must be a finite number >= 0"},
      {{10, inf, 40}, "--temperature = inf must be a finite number >= 0"},
      {{10, nan, 40}, "--temperature = nan must be a finite number >= 0"},
      {{10, 0.8f, -3}, "--top-k = -3 must be >= 0"},
  };
  for (const Case& c : cases) {
    try {
      train::validate_sampling_options(c.options, {"--tokens", "--temperature", "--top-k"});
      ADD_FAILURE() << "accepted: " << c.message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
    EXPECT_THROW(m.generate({1}, c.options), Error) << c.message;
  }
  try {
    m.generate({1, 97}, {});
    ADD_FAILURE() << "a prompt token outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt token 97 at position 1 is outside the model's vocabulary [0, 97)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(m.generate({}, {}), Error);
  // Zero tokens is a valid request: the prompt comes back.
  train::SamplingOptions none;
  none.max_new_tokens = 0;
  EXPECT_EQ(m.generate({4, 5}, none), (std::vector<int32_t>{4, 5}));
}
