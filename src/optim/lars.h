#pragma once
// LARS (You et al. 2017, Algorithm 1): momentum SGD whose step for each tensor is scaled by the
// local learning rate η‖w‖ / (‖g‖ + λ‖w‖ + ε), the trust coefficient η times the ratio of the
// weights' norm to the (decayed) gradient's, so every layer moves by a similar fraction of its
// weights at large batch sizes:  b ← μ b + lr · local · (g + λ w),  w ← w − b.
// Biases and norm gains are excluded from adaptation and decay (local = 1, λ = 0: momentum SGD).
// A zero norm on either side gives local = 1.
//
// The norms are of whole tensors, reduced over the ZeRO shards (optim/tensor_statistics.h).
// State: the momentum buffer, 4 bytes per owned element (none with momentum 0).
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

class Lars final : public Optimizer {
 public:
  Lars(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
       std::span<const Segment> layout, const ShardReduction* reduction);

  std::string_view name() const override { return optimizer_name(OptimizerKind::Lars); }
  void step(float lr, std::span<const Segment> segments) override;
  StateDict state_dict() override;  // "momentum": [owned elements], when momentum > 0
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return owned_; }

 private:
  OptimizerConfig config_;
  const ShardReduction* reduction_;
  TensorSums norms_;  // per parameter: ‖w‖², ‖g‖²
  int64_t owned_ = 0;
  Tensor momentum_;
  int64_t step_ = 0;
};

}  // namespace tessera::optim
