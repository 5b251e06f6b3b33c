#include "config/tensor_parallel_shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

}  // namespace tessera::config
