#pragma once
// What a module's forward/backward needs besides its tensors: where memory comes from, where its
// parameters' working copies and gradient targets are (nn/parameter_access.h), and the coordinates
// of the random numbers (dropout) of this microbatch. Passed explicitly; no globals.
#include <cstdint>

#include "core/tensor.h"
#include "nn/expert_exchange.h"
#include "nn/parameter_access.h"
#include "nn/saved_tensor.h"
#include "nn/tensor_region.h"

namespace tessera::nn {

// Which half of a backward runs. Input: the gradient with respect to the module's input (and the
// cheap by-products of it: norm gains and biases); Weight: the gradients of the matrices (and of
// linear biases), which need only what the input half kept. Both: the two in one pass, the same
// bits as Input followed by Weight. Zero-bubble pipeline schedules run the halves at different times.
enum class BackwardPart { Both, Input, Weight };

inline bool computes_input_gradient(BackwardPart part) { return part != BackwardPart::Weight; }
inline bool computes_weight_gradient(BackwardPart part) { return part != BackwardPart::Input; }

struct MoeStatistics;  // nn/moe.h

struct StepContext {
  MemoryAccountant& memory;
  ParameterAccess& params;
  bool training = true;
  uint64_t seed = 0;          // run seed (dropout masks)
  uint64_t step = 0;          // optimizer step, so masks differ from step to step
  int64_t sample_offset = 0;  // global index of this microbatch's first sequence: masks do not depend on the layout
  // The tensor-parallel group's marks (nn/tensor_region.h); null: the identity.
  TensorRegion* region = nullptr;
  // The dtype of activations, their gradients and the weights' working copies: f32, or bf16 or f16
  // under mixed precision. Statistics (norms', attention's, the losses) are f32 whatever it is.
  DType compute = DType::F32;
  // The gradient of this microbatch's token-loss sum is taken times this (Microbatch::grad_scale);
  // losses a module adds of its own (an MoE router's) join the gradient at the same scale.
  float grad_scale = 1.0f;
  // Expert parallelism's all-to-all (nn/expert_exchange.h); null: every expert is here.
  ExpertExchange* experts = nullptr;
  // Where MoE layers add what their routing did (nn/moe.h); null: nothing recorded (recompute,
  // evaluation).
  MoeStatistics* moe_statistics = nullptr;

  Tensor weight(const Parameter& p) const { return params.weight(p); }
  Tensor grad(const Parameter& p) const { return params.grad(p); }

  // Tensors saved for backward (or feeding the next op) are activations; scratch of backward is
  // workspace. Both in the compute dtype unless another is asked for.
  Tensor activation(const Shape& shape) const { return activation(shape, compute); }
  Tensor activation(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, MemoryTag::Activations, memory);
  }
  Tensor workspace(const Shape& shape) const { return workspace(shape, compute); }
  Tensor workspace(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, MemoryTag::Workspace, memory);
  }
  // Statistics saved for backward (norms' mean and 1/σ, attention's log-sum-exp, losses): f32.
  Tensor statistics(const Shape& shape) const { return activation(shape, DType::F32); }

  // The marks of nn/tensor_region.h, the identity without a region.
  Tensor enter_region(const Tensor& x) { return region ? region->enter(*this, x) : x; }
  Tensor enter_region_backward(const Tensor& dx) { return region ? region->enter_backward(*this, dx) : dx; }
  Tensor leave_region(const Tensor& partial) { return region ? region->leave(*this, partial) : partial; }
  Tensor leave_region_backward(const Tensor& dy) { return region ? region->leave_backward(*this, dy) : dy; }
  SequenceShard sequence_shard() const { return region ? region->sequence_shard() : SequenceShard{}; }
};

}  // namespace tessera::nn
