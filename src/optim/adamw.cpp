#include "optim/adamw.h"

#include <algorithm>

#include "kernels/cpu/adamw.h"

namespace tessera::optim {

AdamW::AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config)
    : AdamW(params, memory, config, nn::ParamRange{0, params.numel()}) {}

AdamW::AdamW(nn::ParameterStore& params, MemoryAccountant& memory, AdamWConfig config, nn::ParamRange owned)
    : params_(params), config_(config), owned_(owned) {
  TS_CHECK(params.allocated(), "AdamW needs allocated parameters");
  TS_CHECK(owned.begin >= 0 && owned.begin <= owned.end && owned.end <= params.numel(),
           "AdamW: owned range [{}, {}) is not inside the {} parameters", owned.begin, owned.end, params.numel());
  m_ = Tensor::zeros({owned.size()}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({owned.size()}, DType::F32, MemoryTag::Optimizer, memory);
}

void AdamW::step(float lr) {
  const int64_t b = owned_.begin;
  step(lr, params_.flat_values().data<float>() + b, params_.flat_grads().data<float>() + b);
}

void AdamW::step(float lr, float* values, const float* grads) {
  ++step_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const auto& p : params_.all()) {
    // The part of this parameter inside the owned range, as offsets from the range's start.
    const int64_t lo = std::max(owned_.begin, static_cast<int64_t>(p.offset)) - owned_.begin;
    const int64_t hi = std::min(owned_.end, static_cast<int64_t>(p.offset) + p.numel()) - owned_.begin;
    if (hi <= lo) continue;
    // Decay matrices and embeddings, not biases and norm gains.
    const float wd = p.shape.size() >= 2 ? config_.weight_decay : 0.0f;
    kernels::adamw_update(values + lo, grads + lo, m + lo, v + lo, static_cast<size_t>(hi - lo), lr, config_.beta1,
                          config_.beta2, config_.eps, wd, step_);
  }
}

}  // namespace tessera::optim
