#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace tessera::train {

std::vector<int32_t> generate(nn::GPT& model, MemoryAccountant& memory, nn::ParameterAccess& params,
                              const std::vector<int32_t>& prompt, const SamplingOptions& options) {
  TS_CHECK(!prompt.empty(), "sampling needs a prompt of at least one token");
  TS_CHECK(options.temperature > 0.0f, "sampling temperature must be positive, got {}", options.temperature);
  const int V = model.config().vocab_size, Tmax = model.config().seq_len;
  std::vector<int32_t> tokens = prompt;
  nn::StepContext step{memory, params};
  step.training = false;
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(tokens.size()), Tmax);
    const int32_t* context = tokens.data() + tokens.size() - static_cast<size_t>(T);
    Tensor logits = model.logits(step, context, 1, T);  // [1, T, V]
    const float* last = logits.data<float>() + static_cast<int64_t>(T - 1) * V;
    // Softmax over the top-k logits at the given temperature.
    std::iota(order.begin(), order.end(), 0);
    int k = options.top_k > 0 ? std::min(options.top_k, V) : V;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return last[a] > last[b]; });
    const double top = last[order[0]];
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      probs[static_cast<size_t>(j)] = std::exp((last[order[static_cast<size_t>(j)]] - top) / options.temperature);
      sum += probs[static_cast<size_t>(j)];
    }
    double u = uniform(options.seed, stream_id("sample"), tokens.size()) * sum;
    int chosen = order[static_cast<size_t>(k - 1)];
    for (int j = 0; j < k; ++j) {
      u -= probs[static_cast<size_t>(j)];
      if (u <= 0) {
        chosen = order[static_cast<size_t>(j)];
        break;
      }
    }
    tokens.push_back(chosen);
  }
  return tokens;
}

}  // namespace tessera::train
