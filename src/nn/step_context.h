#pragma once
// What a module's forward/backward needs besides its tensors: where memory comes from and the
// coordinates of the random numbers (dropout) of this microbatch. Passed explicitly; no globals.
#include <cstdint>

#include "core/tensor.h"
#include "nn/execution_hooks.h"

namespace tessera::nn {

struct StepContext {
  MemoryAccountant& memory;
  bool training = true;
  uint64_t seed = 0;           // run seed (dropout masks)
  uint64_t step = 0;           // optimizer step, so masks differ from step to step
  int64_t sample_offset = 0;   // global index of this microbatch's first sequence: masks do not depend on the layout
  ExecutionHooks* hooks = nullptr;  // transforms applied from outside (data parallel, ZeRO), or none

  // Tensors saved for backward (or feeding the next op) are activations; scratch of backward is workspace.
  void before_forward(int unit) const { if (hooks) hooks->before_forward(unit); }
  void after_forward(int unit) const { if (hooks) hooks->after_forward(unit); }
  void before_backward(int unit) const { if (hooks) hooks->before_backward(unit); }
  void after_backward(int unit) const { if (hooks) hooks->after_backward(unit); }

  Tensor activation(const Shape& shape, DType dtype = DType::F32) const {
    return Tensor::empty(shape, dtype, MemoryTag::Activations, memory);
  }
  Tensor workspace(const Shape& shape, DType dtype = DType::F32) const {
    return Tensor::empty(shape, dtype, MemoryTag::Workspace, memory);
  }
};

}  // namespace tessera::nn
