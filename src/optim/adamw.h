#pragma once
// AdamW (Loshchilov & Hutter) with PyTorch's semantics: decoupled weight decay, bias correction.
// Weight decay applies to matrices and embeddings (parameters with two or more dimensions), not
// to biases and norm gains, as GPT-2 training recipes do. State: m and v, 8 bytes per parameter,
// tagged 'optimizer'.
#include <cstdint>

#include "nn/parameters.h"

namespace tessera::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config);
  // One update with learning rate `lr` from the gradients in the store.
  void step(float lr);
  int64_t steps_taken() const { return step_; }
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  const AdamWConfig& config() const { return config_; }

 private:
  nn::ParameterStore& params_;
  AdamWConfig config_;
  Tensor m_;  // [numel]
  Tensor v_;  // [numel]
  int64_t step_ = 0;
};

}  // namespace tessera::optim
