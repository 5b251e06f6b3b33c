#include "config/tensor_parallel_shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"

namespace tessera::config {

namespace {
// What is wrong with splitting the model over tp ranks ("" when nothing).
std::string problems(const ModelConfig& model, int tp) {
  std::string text;
  auto add = [&](const std::string& problem) { text += (text.empty() ? "" : "; ") + problem; };
  if (model.n_head % tp != 0) add(fmt::format("model.n_head = {} heads do not divide among {} ranks", model.n_head, tp));
  if (model.kv_heads() % tp != 0) {
    add(fmt::format("model.n_kv_head = {} key/value heads do not divide among {} ranks", model.kv_heads(), tp));
  }
  if (model.ffn() % tp != 0) add(fmt::format("the MLP's hidden width {} does not divide among {} ranks", model.ffn(), tp));
  return text;
}
}  // namespace

std::vector<int> tensor_parallel_sizes(const ModelConfig& model, int limit) {
  std::vector<int> sizes;
  for (int tp = 1; tp <= limit; ++tp) {
    if (problems(model, tp).empty()) sizes.push_back(tp);
  }
  return sizes;
}

std::optional<std::string> tensor_parallel_refusal(const ModelConfig& model, int tp) {
  if (tp < 1) return fmt::format("parallel.tp = {} must be at least 1", tp);
  const std::string text = problems(model, tp);
  if (text.empty()) return std::nullopt;
  return fmt::format("parallel.tp = {} does not split the model: {}. tp values that work: {}", tp, text,
                     fmt::join(tensor_parallel_sizes(model, std::max(64, tp)), ", "));
}

int64_t tensor_parallel_rank_parameters(const ModelConfig& model, int tp) {
  TS_CHECK(!tensor_parallel_refusal(model, tp), "{}", *tensor_parallel_refusal(model, tp));
  const int64_t C = model.n_embd, F = model.ffn(), W3 = model.qkv_dim(), t = tp, b = model.bias ? 1 : 0;
  const int64_t V = (int64_t{model.vocab_size} + t - 1) / t * t;  // padded
  const bool gpt2 = model.arch == Architecture::Gpt2;
  // Column-parallel weights with their biases, and row-parallel weights: split.
  const int64_t mlp_in = (model.gated_mlp() ? 2 : 1) * (C * F + b * F);  // fc, or gate and up
  const int64_t split = (C * W3 + b * W3) + C * C + mlp_in + F * C;
  // Two norms (LayerNorm has a shift) and the row-parallel biases: whole on every rank.
  const int64_t norm = (gpt2 ? 1 + b : 1) * C;
  const int64_t replicated = 2 * norm + 2 * b * C;
  const int64_t tables = (model.tied_embeddings ? 1 : 2) * V / t * C;
  const int64_t positions = gpt2 ? int64_t{model.seq_len} * C : 0;
  return model.n_layer * (split / t + replicated) + tables + positions + norm;
}

}  // namespace tessera::config
