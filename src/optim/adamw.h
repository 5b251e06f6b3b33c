#pragma once
// AdamW (Loshchilov & Hutter) with PyTorch's semantics: decoupled weight decay, bias correction.
// Weight decay applies to matrices and embeddings (parameters with two or more dimensions in the
// one-process model), not to biases and norm gains, as GPT-2 training recipes do. State: m and v,
// 8 bytes per owned element, tagged 'optimizer'. The update is elementwise, so a sharded update
// gives the same bits as the whole one on the same gradients.
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"

namespace tessera::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  int64_t variance_freeze_step = 0;  // v stays after this step (0: never); see optim/optimizer_config.h
};

class AdamW final : public Optimizer {
 public:
  AdamW(MemoryAccountant& memory, AdamWConfig config, int64_t owned_elements);

  std::string_view name() const override { return optimizer_name(OptimizerKind::AdamW); }
  void step(float lr, std::span<const Segment> segments) override;
  StateDict state_dict() override;  // "m", "v": [owned elements]
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return m_.numel(); }
  const AdamWConfig& config() const { return config_; }

 private:
  AdamWConfig config_;
  Tensor m_;  // [owned elements]
  Tensor v_;  // [owned elements]
  int64_t step_ = 0;
};

}  // namespace tessera::optim
