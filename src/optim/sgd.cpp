#include "optim/sgd.h"

#include "ops/optimizer_update.h"

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
  int64_t at = 0;
  for (const Segment& s : segments) {
    const float wd = is_weight(*s.param) ? config_.weight_decay : 0.0f;
    const Tensor buffer = config_.momentum > 0.0f ? momentum_.slice(0, at, at + s.size()) : Tensor();
    ops::sgd_update(s.values(), s.grads(), buffer,
                    {lr, config_.momentum, wd, config_.decoupled_weight_decay, config_.nesterov});
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
