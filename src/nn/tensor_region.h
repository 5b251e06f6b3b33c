#pragma once
// Where the model leaves the residual stream, which every rank of a tensor-parallel group holds
// whole, for a computation split over the group, and where it comes back: Megatron's conjugate
// operators f (entering: attention's and the MLP's first projections, the head) and g (leaving:
// their last projections, the vocabulary-parallel embedding). The model marks these places; what
// happens there is the tensor-parallel transform's business (parallel/tensor_parallel.h). With no
// region installed — one process, or a layout without tensor parallelism — every mark is the
// identity, so the one-process model runs the same code.
//
// Under sequence parallelism (Korthikanti et al. 2022) the residual stream itself is split: each
// rank of the group holds a contiguous part of every sequence, [B, T/t, C]. Entering a region then
// gathers the whole sequence and leaving it reduce-scatters the partial sums back onto the parts;
// the modules ask sequence_shard() where their part lies (positions, dropout masks).
//
// Shapes: B batch, T sequence, C n_embd, Ts the part of the sequence this rank's residual stream
// holds (T without sequence parallelism, T/t with it).
#include <span>

#include "core/tensor.h"

namespace tessera::nn {

struct StepContext;

// Which part of every sequence this rank's residual stream holds: part `index` of `parts` equal,
// contiguous parts (index 0 of 1: the whole sequence).
struct SequenceShard {
  int index = 0;
  int parts = 1;
  int64_t first(int64_t local_length) const { return int64_t{index} * local_length; }
};

class TensorRegion {
 public:
  virtual ~TensorRegion() = default;
  // f forward: x [B, Ts, C] of the residual stream -> the split computation's input [B, T, C].
  virtual Tensor enter(StepContext& step, const Tensor& x) = 0;
  // f backward: the split computation's input gradient [B, T, C], a partial sum on each rank ->
  // the residual stream's [B, Ts, C].
  virtual Tensor enter_backward(StepContext& step, const Tensor& dx) = 0;
  // g forward: a partial sum [B, T, C] on each rank -> the residual stream's value [B, Ts, C].
  virtual Tensor leave(StepContext& step, const Tensor& partial) = 0;
  // g backward: the residual stream's gradient [B, Ts, C] -> the split computation's output
  // gradient [B, T, C].
  virtual Tensor leave_backward(StepContext& step, const Tensor& dy) = 0;
  // The part of the sequence the residual stream holds on this rank.
  virtual SequenceShard sequence_shard() const = 0;
  // Per-row statistics of a vocabulary split over the group (the loss needs the row maximum, the
  // sum of exponentials and the target's logit of the whole vocabulary), reduced in place.
  virtual void max_over_group(std::span<float> values) = 0;
  virtual void sum_over_group(std::span<float> values) = 0;
};

}  // namespace tessera::nn
