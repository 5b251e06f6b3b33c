// Decoding with a key/value cache (GPT::decode) against the whole-context forward (GPT::logits):
// a prefill then one token at a time, or chunks, give the logits of the same positions, for GPT-2
// (learned positions) and Llama (rotary positions at their offsets), on weights far from the
// initial ones so that biases and norm gains matter.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "../common/random_weights.h"
#include "nn/gpt.h"

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
  c.tied_embeddings = arch == Architecture::Gpt2;
  return c;
}

double row_relative_error(const float* a, const float* b, int n) {
  double diff = 0, ref = 0;
  for (int i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

void expect_decode_matches_logits(Architecture arch, int prefill, int chunk, int kv_heads = 0) {
  ModelConfig c = small_config(arch);
  c.n_kv_head = kv_heads;
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  tessera::testing::randomize_weights(model.parameters(), 3, 0.2);
  const int B = 2, T = c.seq_len, V = c.vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(uniform(8, 1, i) * static_cast<float>(V));
  nn::StepContext step{mem, model.parameters()};
  step.training = false;
  const Tensor full = model.logits(step, tokens.data(), B, T);  // [B, T, V]

  nn::GPT::KVCache cache = model.make_kv_cache(mem, B);
  int checked = 0;
  for (int past = 0; past < T;) {
    const int n = std::min(past == 0 ? prefill : chunk, T - past);
    std::vector<int32_t> part(static_cast<size_t>(B * n));
    for (int b = 0; b < B; ++b) {
      std::copy_n(tokens.begin() + b * T + past, n, part.begin() + b * n);
    }
    const Tensor logits = model.decode(step, cache, part.data(), B, n);  // [B, V]
    ASSERT_EQ(logits.shape(), (Shape{B, V}));
    past += n;
    EXPECT_EQ(cache.length, past);
    for (int b = 0; b < B; ++b) {
      const float* want = full.data<float>() + (static_cast<int64_t>(b) * T + past - 1) * V;
      EXPECT_LT(row_relative_error(logits.data<float>() + static_cast<int64_t>(b) * V, want, V), 1e-5)
          << "b=" << b << " position " << past - 1;
      ++checked;
    }
  }
  EXPECT_GT(checked, 2 * B);
}

}  // namespace

TEST(GPTDecode, Gpt2TokenByTokenMatchesTheWholeContext) { expect_decode_matches_logits(Architecture::Gpt2, 1, 1); }
TEST(GPTDecode, Gpt2PrefillThenTokensMatchesTheWholeContext) { expect_decode_matches_logits(Architecture::Gpt2, 9, 1); }
TEST(GPTDecode, LlamaTokenByTokenMatchesTheWholeContext) { expect_decode_matches_logits(Architecture::Llama, 1, 1); }
TEST(GPTDecode, LlamaPrefillThenChunksMatchesTheWholeContext) { expect_decode_matches_logits(Architecture::Llama, 7, 5); }
// Grouped-query attention: the cache holds the 2 key/value heads of the 4 heads.
TEST(GPTDecode, LlamaGroupedQueryAttentionMatchesTheWholeContext) {
  expect_decode_matches_logits(Architecture::Llama, 7, 1, 2);
}

TEST(GPTDecode, RefusesPositionsPastTheContext) {
  const ModelConfig c = small_config(Architecture::Llama);
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  nn::StepContext step{mem, model.parameters()};
  nn::GPT::KVCache cache = model.make_kv_cache(mem, 1);
  std::vector<int32_t> tokens(static_cast<size_t>(c.seq_len), 3);
  model.decode(step, cache, tokens.data(), 1, c.seq_len - 1);
  model.decode(step, cache, tokens.data(), 1, 1);
  try {
    model.decode(step, cache, tokens.data(), 1, 1);
    FAIL() << "a token past seq_len was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("24 cached and 1 new positions exceed the model's seq_len 24"),
              std::string::npos)
        << e.what();
  }
  cache.length = 0;  // starting over is allowed
  EXPECT_EQ(model.decode(step, cache, tokens.data(), 1, 3).shape(), (Shape{1, c.vocab_size}));
}
