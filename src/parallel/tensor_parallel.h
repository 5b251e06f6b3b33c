#pragma once
// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) as a transform of a model that holds no
// parallel code. Two parts:
//
// The plan (TensorParallelPlan) is data: which linear layers are column-parallel (their output
// features split over the tp group: attention's q, k, v by heads, the MLP's first projections),
// which row-parallel (their input features split: attention's output projection, the MLP's last),
// and which tables split by vocabulary rows (the token embedding and an untied head). As the
// model's ShardingRules it gives every parameter its ShardSpec when the model declares it, so the
// model is built from blocks whose values are the one-process model's (initialized by global
// index). A vocabulary that tp does not divide is padded with rows that start at zero and whose
// classes the loss never lets win.
//
// The region (TensorParallelRegion) is what happens at the model's marks (nn/tensor_region.h):
// entering a split computation is the identity going forward and an all-reduce of the input
// gradient going back (f); leaving it, an all-reduce of the partial sums going forward and the
// identity going back (g). So a block costs four all-reduces of B·T·C per forward and backward,
// plus the vocabulary-parallel embedding's and head's.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "nn/parameters.h"
#include "nn/tensor_region.h"

namespace tessera::parallel {

enum class TensorSplit {
  ColumnByHeads,  // fused q, k, v [3C, C]: each rank takes its heads of q, of k and of v (rows)
  Column,         // [OC, IC] and bias [OC] split by output features (rows)
  Row,            // [OC, IC] split by input features (columns); the bias stays whole
  VocabRows,      // [V, C] split by vocabulary rows, V padded to a multiple of tp
};
std::string_view tensor_split_name(TensorSplit split);  // "column (by heads)", "column", "row", "vocabulary rows"

struct TensorParallelRule {
  std::string layer;  // a layer name or the last parts of one: "attn.qkv" matches "blocks.3.attn.qkv"
  TensorSplit split;
};

class TensorParallelPlan final : public nn::ShardingRules {
 public:
  // Megatron's plan for the GPT-2 and Llama blocks, the embedding and the head.
  static std::vector<TensorParallelRule> megatron_rules();

  // This rank's (`rank` of `tp`) plan for `model`; throws when tp does not split its shapes
  // (config::tensor_parallel_refusal).
  TensorParallelPlan(const config::ModelConfig& model, int tp, int rank,
                     std::vector<TensorParallelRule> rules = megatron_rules());

  std::optional<nn::ShardSpec> spec_for(const std::string& name, const Shape& shape) const override;
  // One line per rule, for the start of a run: "attn.qkv: column (by heads), ...".
  std::string describe() const;
  // Rows the vocabulary gains to divide among the ranks.
  int64_t vocab_padding() const { return padded_vocab_ - model_.vocab_size; }

 private:
  const TensorParallelRule* rule_for(const std::string& layer) const;

  config::ModelConfig model_;
  int tp_ = 1, rank_ = 0;
  int64_t padded_vocab_ = 0;
  std::vector<TensorParallelRule> rules_;
};

// The one-process value of parameter `p`, [p.spec.unpadded_shape()] row-major, from every rank's
// block of it (`block`, [p.shape]). Collective over `group`, the group that splits it (a parameter
// it does not split is this rank's block as it is).
std::vector<float> gather_parameter(dist::Communicator* group, const nn::Parameter& p, std::span<const float> block);

// Fills `whole`, the store of a one-process model (declared without a plan, same config), with
// the values of `blocks`' parameters as `values` holds them. Collective over `group`.
void gather_parameters(dist::Communicator* group, const nn::ParameterStore& blocks, nn::ParameterAccess& values,
                       nn::ParameterStore& whole);

// The region over the tensor-parallel group's communicator (kept by reference).
class TensorParallelRegion final : public nn::TensorRegion {
 public:
  explicit TensorParallelRegion(dist::Communicator& group) : group_(group) {}

  Tensor enter(nn::StepContext& step, const Tensor& x) override;
  Tensor enter_backward(nn::StepContext& step, const Tensor& dx) override;
  Tensor leave(nn::StepContext& step, const Tensor& partial) override;
  Tensor leave_backward(nn::StepContext& step, const Tensor& dy) override;
  void max_over_group(std::span<float> values) override;
  void sum_over_group(std::span<float> values) override;

  dist::Communicator& group() const { return group_; }

 private:
  dist::Communicator& group_;
};

}  // namespace tessera::parallel
