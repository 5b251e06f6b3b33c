#pragma once
// LAMB (You et al. 2020, Algorithm 2): Adam's direction r = m̂ / (√v̂ + ε) plus decoupled weight
// decay, u = r + λw, scaled per tensor by the trust ratio ‖w‖ / ‖u‖, so each layer moves by a
// fixed fraction of its norm and the learning rate can grow with the batch. Biases and norm gains
// are excluded from both adaptation and decay (their step is Adam's). A zero norm on either side
// gives a ratio of 1.
//
// The norms are of whole tensors: under ZeRO each rank sums the squares of its part and the sums
// are reduced over the shards (optim/tensor_statistics.h), so every holder applies the ratio of
// the unsharded tensor. State: m and v, 8 bytes per owned element.
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

class Lamb final : public Optimizer {
 public:
  // `store`: every parameter of the model (the statistics table's layout); `reduction`: null in a
  // one-process run.
  Lamb(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
       std::span<const Segment> layout, const ShardReduction* reduction);

  std::string_view name() const override { return optimizer_name(OptimizerKind::Lamb); }
  void step(float lr, std::span<const Segment> segments) override;
  StateDict state_dict() override;  // "m", "v": [owned elements]
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return m_.numel(); }

 private:
  OptimizerConfig config_;
  const ShardReduction* reduction_;
  TensorSums norms_;  // per parameter: ‖w‖², ‖u‖²
  Tensor m_;
  Tensor v_;
  int64_t step_ = 0;
};

}  // namespace tessera::optim
