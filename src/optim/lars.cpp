#include "optim/lars.h"

#include <cmath>

#include "ops/optimizer_update.h"

namespace tessera::optim {

Lars::Lars(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
           std::span<const Segment> layout, const ShardReduction* reduction)
    : config_(config),
      reduction_(reduction),
      norms_(std::vector<int64_t>(store.all().size(), 2)),
      owned_(total_elements(layout)) {
  TS_CHECK(config.momentum >= 0.0f && config.momentum < 1.0f, "LARS: momentum = {} must be in [0, 1)", config.momentum);
  TS_CHECK(config.trust_coefficient > 0.0f, "LARS: the trust coefficient must be positive, got {}",
           config.trust_coefficient);
  if (config.momentum > 0.0f) momentum_ = Tensor::zeros({owned_}, DType::F32, MemoryTag::Optimizer, memory);
}

void Lars::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(total_elements(segments) == owned_,
           "LARS: the segments hold {} elements but its state covers {}: the owned elements changed",
           total_elements(segments), owned_);
  ++step_;
  norms_.clear();
  for (const Segment& s : segments) {
    if (!is_weight(*s.param)) continue;
    const ops::SquareSums squares = ops::lars_squares(s.values(), s.grads());
    std::span<double> sums = norms_.of(*s.param);
    sums[0] += squares.first;
    sums[1] += squares.second;
  }
  norms_.reduce(reduction_, segments);

  const float mu = config_.momentum;
  int64_t at = 0;
  for (const Segment& s : segments) {
    const bool adapted = is_weight(*s.param);
    const float wd = adapted ? config_.weight_decay : 0.0f;
    double local = adapted ? 1.0 : double(config_.unadapted_lr_scale);
    if (adapted) {
      std::span<const double> sums = norms_.of(*s.param);
      const double w_norm = std::sqrt(sums[0]), g_norm = std::sqrt(sums[1]);
      if (w_norm > 0 && g_norm > 0) {
        local = double(config_.trust_coefficient) * w_norm / (g_norm + double(wd) * w_norm + double(config_.eps));
      }
    }
    const auto scale = static_cast<float>(double(lr) * local);
    const Tensor buffer = mu > 0.0f ? momentum_.slice(0, at, at + s.size()) : Tensor();
    ops::lars_update(s.values(), s.grads(), buffer, scale, wd, mu);
    at += s.size();
  }
}

StateDict Lars::state_dict() {
  StateDict out{step_, {}};
  if (config_.momentum > 0.0f) out.tensors.push_back({"momentum", momentum_, {}});
  return out;
}

void Lars::load_state_dict(StateDict state) {
  if (config_.momentum > 0.0f) load_state_tensor(state, "momentum", momentum_, name());
  step_ = state.steps;
}

}  // namespace tessera::optim
