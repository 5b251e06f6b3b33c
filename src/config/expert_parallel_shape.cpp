#include "config/expert_parallel_shape.h"

#include <fmt/format.h>

namespace tessera::config {

std::optional<std::string> expert_parallel_refusal(const ModelConfig& model, int ep) {
  if (ep <= 1) return std::nullopt;
  if (model.moe_experts == 0) {
    return fmt::format("parallel.ep = {} splits the experts of MoE layers, but the model has none: set "
                       "model.moe_experts (a multiple of {}) or use parallel.ep = 1", ep, ep);
  }
  if (model.moe_experts % ep != 0) {
    return fmt::format("parallel.ep = {} must divide model.moe_experts = {} (each rank holds the same number of "
                       "experts); use an ep that divides it or {} experts", ep, model.moe_experts,
                       (model.moe_experts + ep - 1) / ep * ep);
  }
  return std::nullopt;
}

}  // namespace tessera::config
