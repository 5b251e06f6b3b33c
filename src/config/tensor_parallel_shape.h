#pragma once
// Whether a model's shapes split over tp tensor-parallel ranks, and if not, which tp values would:
// the heads (q's and, with grouped-query attention, k's and v's) and the MLP's hidden width must
// divide by tp; the vocabulary need not (it is padded). The run config refuses a bad tp with this
// message before any work; the tensor-parallel plan asserts the same.
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace tessera::config {

// The tp values up to `limit` that split the model's shapes.
std::vector<int> tensor_parallel_sizes(const ModelConfig& model, int limit);
// nullopt when tp splits the model, else the reason and the values that work.
std::optional<std::string> tensor_parallel_refusal(const ModelConfig& model, int tp);

// Parameters one of tp ranks holds under the Megatron plan (parallel/tensor_parallel.h): its block
// of every split weight (the vocabulary padded to a multiple of tp) and every replicated parameter
// (norms, row-parallel biases, learned positions) whole. tp = 1 gives parameter_count().
int64_t tensor_parallel_rank_parameters(const ModelConfig& model, int tp);

}  // namespace tessera::config
