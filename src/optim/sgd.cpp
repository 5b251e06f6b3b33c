#include "optim/sgd.h"

namespace tessera::optim {

Sgd::Sgd(MemoryAccountant& memory, const OptimizerConfig& config, std::span<const Segment> layout)
    : config_(config), owned_(total_elements(layout)) {
  TS_CHECK(config.momentum >= 0.0f && config.momentum < 1.0f, "SGD: momentum = {} must be in [0, 1)", config.momentum);
  TS_CHECK(!config.nesterov || config.momentum > 0.0f, "SGD: Nesterov momentum needs momentum > 0");
  if (config.momentum > 0.0f) momentum_ = Tensor::zeros({owned_}, DType::F32, MemoryTag::Optimizer, memory);
}

void Sgd::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(total_elements(segments) == owned_,
           "SGD: the segments hold {} elements but its state covers {}: the owned elements changed",
           total_elements(segments), owned_);
  ++step_;
  const float mu = config_.momentum;
  float* buffer = mu > 0.0f ? momentum_.data<float>() : nullptr;
  int64_t at = 0;
  for (const Segment& s : segments) {
    const float wd = is_weight(*s.param) ? config_.weight_decay : 0.0f;
    // Formed in double and rounded once, as PyTorch does with its Python-float hyperparameters.
    const auto decay = static_cast<float>(1.0 - double(lr) * double(wd));
    const float l2 = config_.decoupled_weight_decay ? 0.0f : wd;
    float* p = s.value;
    const float* g = s.grad;
    float* b = buffer == nullptr ? nullptr : buffer + at;
    for (int64_t i = 0; i < s.size(); ++i) {
      if (config_.decoupled_weight_decay && wd != 0.0f) p[i] *= decay;
      float d = l2 != 0.0f ? g[i] + l2 * p[i] : g[i];
      if (b != nullptr) {
        // The buffer starts at zero, so the first step's mu·0 + d is d itself, as PyTorch's clone.
        b[i] = b[i] * mu + d;
        d = config_.nesterov ? d + mu * b[i] : b[i];
      }
      p[i] = p[i] + (-lr) * d;
    }
    at += s.size();
  }
}

StateDict Sgd::state_dict() {
  StateDict out{step_, {}};
  if (config_.momentum > 0.0f) out.tensors.push_back({"momentum", momentum_, {}});
  return out;
}

void Sgd::load_state_dict(StateDict state) {
  if (config_.momentum > 0.0f) load_state_tensor(state, "momentum", momentum_, name());
  step_ = state.steps;
}

}  // namespace tessera::optim
