#include "optim/adamw.h"

#include "kernels/cpu/adamw.h"

namespace tessera::optim {

AdamW::AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config)
    : params_(params), config_(config) {
  TS_CHECK(params.allocated(), "AdamW needs allocated parameters");
  m_ = Tensor::zeros({params.numel()}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({params.numel()}, DType::F32, MemoryTag::Optimizer, memory);
}

void AdamW::step(float lr) {
  ++step_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (auto& p : params_.all()) {
    // Decay matrices and embeddings, not biases and norm gains.
    const float wd = p.shape.size() >= 2 ? config_.weight_decay : 0.0f;
    kernels::adamw_update(p.value.data<float>(), p.grad.data<float>(), m + p.offset, v + p.offset,
                          static_cast<size_t>(p.numel()), lr, config_.beta1, config_.beta2, config_.eps, wd, step_);
  }
}

}  // namespace tessera::optim
