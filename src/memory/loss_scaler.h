#pragma once
// Dynamic loss scaling for fp16 (Micikevicius et al. 2018; PyTorch's GradScaler). fp16 holds
// magnitudes from 6e-8 (subnormal) to 65504, and small gradients flush to zero long before large
// ones overflow. So the backward starts from the loss times a scale S, every gradient is S times
// too large while it is fp16, and the step divides by S in f32. A step whose gradient is not finite
// anywhere is skipped (by every rank: they agree on the global gradient norm) and S is multiplied
// by backoff_factor; after growth_interval finite steps in a row S grows by growth_factor, to keep
// the gradients as far from the underflow as the overflow allows. A fixed scale never changes.
// The state goes into checkpoints, so a resumed run scales exactly as the whole run would.
#include <cstdint>

#include "config/precision.h"

namespace tessera::memory {

class LossScaler {
 public:
  explicit LossScaler(const config::LossScaling& options);

  bool enabled() const { return options_.enabled; }
  // The factor the loss is multiplied by (1 when scaling is off).
  double scale() const { return enabled() ? state_.scale : 1.0; }
  // After a step's gradient check: a finite gradient counts towards growth, a non-finite one backs
  // the scale off (and the step was skipped). Skipped steps are counted with scaling off too.
  void update(bool finite);

  struct State {
    double scale = 1.0;
    int64_t finite_steps = 0;   // in a row, since the scale last changed
    int64_t skipped_steps = 0;  // over the run
    bool operator==(const State&) const = default;
  };
  const State& state() const { return state_; }
  // A checkpoint's state (checked: a scale of at least the smallest one the options allow).
  void restore(const State& state);

 private:
  config::LossScaling options_;
  State state_;
};

}  // namespace tessera::memory
