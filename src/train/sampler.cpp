#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/rng.h"

namespace tessera::train {

void validate_sampling_options(const SamplingOptions& o, const SamplingOptionNames& names) {
  TS_CHECK(o.max_new_tokens >= 0 && o.max_new_tokens <= kMaxSampleTokens,
           "{} = {} must be between 0 and {} (tokens to generate)", names.tokens, o.max_new_tokens, kMaxSampleTokens);
  TS_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0f,
           "{} = {} must be a finite number >= 0 (0 picks the likeliest token every time; 0.7-1.0 is usual)",
           names.temperature, o.temperature);
  TS_CHECK(o.top_k >= 0, "{} = {} must be >= 0 (0 samples among the whole vocabulary)", names.top_k, o.top_k);
}

namespace {

// The next token from the logits of the last position [V].
int32_t choose(const float* logits, int V, const SamplingOptions& o, uint64_t index, std::vector<int>& order,
               std::vector<double>& probs) {
  if (o.temperature == 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  // Softmax over the top-k logits at the given temperature.
  std::iota(order.begin(), order.end(), 0);
  const int k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const double top = logits[order[0]];
  double sum = 0;
  for (int j = 0; j < k; ++j) {
    probs[static_cast<size_t>(j)] = std::exp((logits[order[static_cast<size_t>(j)]] - top) / o.temperature);
    sum += probs[static_cast<size_t>(j)];
  }
  double u = uniform(o.seed, stream_id("sample"), index) * sum;
  for (int j = 0; j < k; ++j) {
    u -= probs[static_cast<size_t>(j)];
    if (u <= 0) return order[static_cast<size_t>(j)];
  }
  return order[static_cast<size_t>(k - 1)];
}

}  // namespace

std::vector<int32_t> generate(nn::GPT& model, MemoryAccountant& memory, nn::ParameterAccess& params,
                              const std::vector<int32_t>& prompt, const SamplingOptions& options) {
  validate_sampling_options(options);
  TS_CHECK(!prompt.empty(), "sampling needs a prompt of at least one token");
  const int V = model.config().vocab_size, Tmax = model.config().seq_len;
  for (size_t i = 0; i < prompt.size(); ++i) {
    TS_CHECK(prompt[i] >= 0 && prompt[i] < V, "prompt token {} at position {} is outside the model's vocabulary [0, {})",
             prompt[i], i, V);
  }
  std::vector<int32_t> tokens = prompt;
  nn::StepContext step{memory, params};
  step.training = false;
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  std::optional<nn::GPT::KVCache> cache;
  if (options.kv_cache) cache = model.make_kv_cache(memory, 1);
  int64_t start = 0;  // the context is tokens [start, n)
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n - start > Tmax) {
      // A prompt longer than the context keeps its last seq_len tokens.
      const bool halve = options.window == ContextWindow::Halve && i > 0;
      start = halve ? n - std::max(1, Tmax / 2) : n - Tmax;
      if (cache) cache->length = 0;  // every position moved: the cache refills from the new start
    }
    Tensor logits;  // [V] of the last position
    if (cache) {
      const int64_t first = start + cache->length;  // the tokens not in the cache yet
      logits = model.decode(step, *cache, tokens.data() + first, 1, static_cast<int>(n - first)).reshape({V});
    } else {
      const int T = static_cast<int>(n - start);
      logits = model.logits(step, tokens.data() + start, 1, T).slice(1, T - 1, T).reshape({V});
    }
    const int32_t next = choose(logits.data<float>(), V, options, tokens.size(), order, probs);
    tokens.push_back(next);
    if (next == options.eos_id) break;
  }
  return tokens;
}

}  // namespace tessera::train
