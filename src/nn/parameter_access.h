#pragma once
// Where a module finds a parameter's storage while it runs: its working copy (the values the op
// reads, [p.shape]) and its gradient target (where the op accumulates, +=, [p.shape]). Modules ask
// through their StepContext at each call instead of keeping pointers, so the answer can change with
// the event being executed: ZeRO-3 answers with a unit's gathered buffer, ZeRO-2 with the gradient
// bucket of the current microbatch, mixed precision with a low-precision copy.
#include "core/tensor.h"

namespace tessera::nn {

struct Parameter;

class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;
  virtual Tensor weight(const Parameter& p) = 0;
  virtual Tensor grad(const Parameter& p) = 0;
};

}  // namespace tessera::nn
