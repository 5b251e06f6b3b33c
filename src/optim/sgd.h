#pragma once
// Stochastic gradient descent with PyTorch's torch.optim.SGD semantics (dampening 0): weight decay
// added to the gradient (L2), or applied to the weights before the step when decoupled (SGDW,
// Loshchilov & Hutter); heavy-ball or Nesterov momentum, the buffer starting at the first step's
// direction. Matrices and embeddings decay, biases and norm gains do not. State: one momentum
// buffer, 4 bytes per owned element, none without momentum. Elementwise: a sharded update gives
// the bits of the whole one.
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"

namespace tessera::optim {

class Sgd final : public Optimizer {
 public:
  Sgd(MemoryAccountant& memory, const OptimizerConfig& config, std::span<const Segment> layout);

  std::string_view name() const override { return optimizer_name(OptimizerKind::Sgd); }
  void step(float lr, std::span<const Segment> segments) override;
  StateDict state_dict() override;  // "momentum": [owned elements], when momentum > 0
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return owned_; }

 private:
  OptimizerConfig config_;
  int64_t owned_ = 0;
  Tensor momentum_;  // [owned elements]; empty without momentum
  int64_t step_ = 0;
};

}  // namespace tessera::optim
