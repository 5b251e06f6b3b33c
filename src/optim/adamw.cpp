#include "optim/adamw.h"

#include "ops/optimizer_update.h"

namespace tessera::optim {

AdamW::AdamW(MemoryAccountant& memory, AdamWConfig config, int64_t owned_elements) : config_(config) {
  TS_CHECK(owned_elements >= 0, "AdamW over {} elements", owned_elements);
  m_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
}

void AdamW::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(total_elements(segments) == owned_elements(),
           "AdamW: the segments hold {} elements but its state covers {}: the owned elements changed",
           total_elements(segments), owned_elements());
  ++step_;
  const int64_t frozen_at =
      config_.variance_freeze_step > 0 && step_ > config_.variance_freeze_step ? config_.variance_freeze_step : 0;
  int64_t at = 0;
  for (const Segment& s : segments) {
    // Decay matrices and embeddings, not biases and norm gains.
    const float wd = is_weight(*s.param) ? config_.weight_decay : 0.0f;
    ops::adamw_update(s.values(), s.grads(), m_.slice(0, at, at + s.size()), v_.slice(0, at, at + s.size()),
                      {lr, config_.beta1, config_.beta2, config_.eps, wd, step_, frozen_at});
    at += s.size();
  }
}

StateDict AdamW::state_dict() { return {step_, {{"m", m_, {}}, {"v", v_, {}}}}; }

void AdamW::load_state_dict(StateDict state) {
  for (auto [name, mine] : {std::pair<const char*, Tensor*>{"m", &m_}, {"v", &v_}}) {
    const Tensor& from = state.at(name);
    TS_CHECK(from.numel() == mine->numel(), "AdamW state '{}' has {} elements, this optimizer owns {}", name,
             from.numel(), mine->numel());
    if (from.raw() != mine->raw()) mine->copy_from(from.reshape(mine->shape()));
  }
  step_ = state.steps;
}

}  // namespace tessera::optim
