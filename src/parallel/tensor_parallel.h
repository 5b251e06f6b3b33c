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
//
// With sequence parallelism (SequenceParallelRegion, Korthikanti et al. 2022) the residual stream
// between the regions — norms, dropout, residual additions — runs on a part of every sequence per
// rank: entering is an all-gather of the parts, leaving a reduce-scatter of the partial sums, and
// their backwards the other way round. The same bytes cross the wire as with the all-reduces, but
// no rank holds the residual stream whole. The parameters every rank holds whole (norm gains,
// row-parallel biases, learned positions) then get a partial gradient from each rank's part:
// sum_sequence_parallel_gradients completes them over the group before the optimizer step.
//
// The transform (TensorParallel, the chain's tensor-parallel slot, exec/transform.h) is how the
// region reaches the model: it installs the region in the step context of every unit action, and
// under sequence parallelism makes the gradient sum when the program finishes.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/transform.h"
#include "nn/parameters.h"
#include "nn/tensor_region.h"
#include "optim/optimizer.h"

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

  std::optional<nn::ShardSpec> spec_for(const std::string& name, const Shape& shape, nn::ParameterRole role,
                                        nn::ParameterPart part) const override;
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
// (`over`: the mesh dimension `group` is; expert parallelism splits expert stacks over EP.)
std::vector<float> gather_parameter(dist::Communicator* group, const nn::Parameter& p, std::span<const float> block,
                                    config::MeshDim over = config::MeshDim::TP);

// Fills `whole`, the store of a one-process model (declared without a plan, same config), with
// the values of `blocks`' parameters as `values` holds them. Collective over `group` (tp) and,
// for expert stacks split over ep, over `experts`.
void gather_parameters(dist::Communicator* group, const nn::ParameterStore& blocks, nn::ParameterAccess& values,
                       nn::ParameterStore& whole, dist::Communicator* experts = nullptr);

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
  nn::SequenceShard sequence_shard() const override { return {}; }

  dist::Communicator& group() const { return group_; }

 private:
  dist::Communicator& group_;
};

// The region of tensor parallelism with sequence parallelism: rank r of t holds positions
// [r T/t, (r + 1) T/t) of every sequence of the residual stream. The collectives exchange one
// contiguous block per rank; with more than one sequence per microbatch the parts are packed into
// rank order first ([t, B, T/t, C]) and unpacked after, one copy each way.
class SequenceParallelRegion final : public nn::TensorRegion {
 public:
  explicit SequenceParallelRegion(dist::Communicator& group) : group_(group) {}

  Tensor enter(nn::StepContext& step, const Tensor& x) override;              // all-gather
  Tensor enter_backward(nn::StepContext& step, const Tensor& dx) override;    // reduce-scatter
  Tensor leave(nn::StepContext& step, const Tensor& partial) override;        // reduce-scatter
  Tensor leave_backward(nn::StepContext& step, const Tensor& dy) override;    // all-gather
  void max_over_group(std::span<float> values) override;
  void sum_over_group(std::span<float> values) override;
  nn::SequenceShard sequence_shard() const override { return {group_.rank(), group_.size()}; }

 private:
  // part [B, T/t, C] -> whole sequences [B, T, C], allocated with `tag`.
  Tensor gather(nn::StepContext& step, const Tensor& part, MemoryTag tag);
  // whole [B, T, C], a partial sum on each rank -> this rank's part [B, T/t, C] of the sum.
  Tensor scatter(nn::StepContext& step, const Tensor& whole, MemoryTag tag);

  dist::Communicator& group_;
};

// The packing of SequenceParallelRegion: whole [B, parts·Ts, C] <-> packed [parts, B, Ts, C], part
// r of every sequence as the r-th contiguous block.
void pack_sequence_parts(void* packed, const void* whole, int64_t parts, int64_t B, int64_t Ts, int64_t C,
                         size_t element_bytes);
void unpack_sequence_parts(void* whole, const void* packed, int64_t parts, int64_t B, int64_t Ts, int64_t C,
                           size_t element_bytes);

// Under sequence parallelism: sums over the tensor-parallel group `group` the gradients of the
// parameters it does not split (their segments of this rank's optimizer, which are the same on
// every rank of the group), in one all-reduce. Segments with no gradient in memory are skipped:
// ZeRO-3's shard in the nvme tier sums them as they land (offloaded_gradients.h).
void sum_sequence_parallel_gradients(dist::Communicator& group, std::span<const optim::Segment> segments);

// Tensor parallelism in the transform chain: every unit action computes with the region over
// `group` (with `sequence_parallel`, the sequence-parallel one), and a training program's finish,
// which comes after the data-parallel reduction's (an inner slot), sums the gradients of the
// parameters the group does not split over it when sequence parallelism leaves them partial. The
// tied embedding's sum between pipeline stages comes after this one (an outer slot), so both
// stages sum complete gradients.
class TensorParallel final : public exec::Transform {
 public:
  // Keeps `group` and `ownership` (this rank's master segments) by reference.
  TensorParallel(dist::Communicator& group, bool sequence_parallel, exec::ParameterOwnership& ownership);

  std::string_view name() const override { return sequence_parallel_ ? "sequence parallel" : "tensor parallel"; }
  void before(const exec::Event& event) override;
  void finish(const exec::Program& program) override;
  nn::SequenceShard sequence_shard() const override { return region_->sequence_shard(); }

 private:
  dist::Communicator& group_;
  bool sequence_parallel_;
  exec::ParameterOwnership& ownership_;
  std::unique_ptr<nn::TensorRegion> region_;
};

}  // namespace tessera::parallel
