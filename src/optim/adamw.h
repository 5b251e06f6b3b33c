#pragma once
// AdamW (Loshchilov & Hutter) with PyTorch's semantics: decoupled weight decay, bias correction.
// Weight decay applies to matrices and embeddings (parameters with two or more dimensions), not
// to biases and norm gains, as GPT-2 training recipes do. State: m and v, 8 bytes per parameter,
// tagged 'optimizer'.
//
// Sharded use (ZeRO): the optimizer may own only a range [begin, end) of the flat parameter
// buffer; it then keeps m and v for that range alone (8 bytes per owned element) and updates only
// those elements. Weight decay still follows the parameter each element belongs to. The update is
// elementwise, so a sharded update gives the same bits as the whole one on the same gradients.
#include <cstdint>

#include "nn/execution_hooks.h"
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
  // Owns the whole flat buffer.
  AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config);
  // Owns the elements [owned.begin, owned.end) of the flat buffer.
  AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config, nn::ParamRange owned);

  // One update with learning rate `lr` from the gradients in the store (the owned range of them).
  void step(float lr);
  // One update of the owned range where its values and gradients live elsewhere (ZeRO shards):
  // values[i] and grads[i] are flat element owned().begin + i.
  void step(float lr, float* values, const float* grads);

  int64_t steps_taken() const { return step_; }
  nn::ParamRange owned() const { return owned_; }
  Tensor& m() { return m_; }  // [owned size]; element i belongs to flat element owned().begin + i
  Tensor& v() { return v_; }
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  const AdamWConfig& config() const { return config_; }

 private:
  nn::ParameterStore& params_;
  AdamWConfig config_;
  nn::ParamRange owned_;
  Tensor m_;  // [owned size]
  Tensor v_;  // [owned size]
  int64_t step_ = 0;
};

}  // namespace tessera::optim
