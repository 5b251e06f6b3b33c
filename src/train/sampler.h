#pragma once
// Text generation from a trained model: greedy decoding (temperature 0) or temperature and top-k
// sampling with the counter RNG, so a (seed, prompt) pair always gives the same text.
//
// Generation decodes with a key/value cache (nn::GPT::decode): the prompt runs through the model
// once, then each new token runs alone and attends to the cached keys and values of the tokens
// before it. The model sees at most seq_len tokens; what happens past that is the context window:
//   Halve (the default): the context restarts from its last seq_len/2 tokens, which run once to
//     refill the cache, and decoding goes on one token at a time. The cost per token stays near
//     one token's forward; right after a restart the model sees half a context.
//   Slide: every token sees the last seq_len tokens, as generation did before the cache. A window
//     that moves by one token changes every position, so the cache refills (a whole seq_len
//     forward) for every token past seq_len: no faster than without a cache there.
// A prompt longer than seq_len keeps its last seq_len tokens either way. Without a cache
// (kv_cache = false) the model reruns the same context for every token: the reference the cache is
// tested and measured against.
#include <cstdint>
#include <vector>

#include "nn/gpt.h"

namespace tessera::train {

enum class ContextWindow { Halve, Slide };

struct SamplingOptions {
  int max_new_tokens = 200;
  float temperature = 0.8f;  // 0: greedy, the likeliest token every time
  int top_k = 40;            // 0: the whole vocabulary
  uint64_t seed = 0;
  int32_t eos_id = -1;       // stop once this token is generated (it ends the output); -1: never stop early
  bool kv_cache = true;      // false: rerun the whole context for every token
  ContextWindow window = ContextWindow::Halve;
};

// Largest max_new_tokens accepted: far beyond any useful sample, small enough that a mistyped
// count fails at once instead of running for hours.
inline constexpr int kMaxSampleTokens = 1'000'000;

// What the checks call each option: the command-line flags or the config keys that set it.
struct SamplingOptionNames {
  const char* tokens = "max_new_tokens";
  const char* temperature = "temperature";
  const char* top_k = "top_k";
};
// Throws naming the option and its valid range: a token count outside [0, kMaxSampleTokens], a
// temperature that is negative, infinite or NaN, a negative top_k.
void validate_sampling_options(const SamplingOptions& options, const SamplingOptionNames& names = {});

// Continues `prompt` (at least one token, each inside the vocabulary) and returns prompt and
// continuation. `params` answers for the weights (the model's store, or the gathered parameters
// under ZeRO-3).
std::vector<int32_t> generate(nn::GPT& model, MemoryAccountant& memory, nn::ParameterAccess& params,
                              const std::vector<int32_t>& prompt, const SamplingOptions& options);

}  // namespace tessera::train
