#pragma once
// Text generation from a trained model: temperature and top-k sampling with the counter RNG, so a
// (seed, prompt) pair always gives the same text.
#include <cstdint>
#include <vector>

#include "nn/gpt.h"

namespace tessera::train {

struct SamplingOptions {
  int max_new_tokens = 200;
  float temperature = 0.8f;
  int top_k = 40;  // 0: the whole vocabulary
  uint64_t seed = 0;
};

// Continues `prompt` (at least one token). The context seen by the model is the last seq_len tokens.
// `params` answers for the weights (the model's store, or the gathered parameters under ZeRO-3).
std::vector<int32_t> generate(nn::GPT& model, MemoryAccountant& memory, nn::ParameterAccess& params,
                              const std::vector<int32_t>& prompt, const SamplingOptions& options);

}  // namespace tessera::train
