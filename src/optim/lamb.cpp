#include "optim/lamb.h"

#include <cmath>

namespace tessera::optim {

namespace {

std::vector<int64_t> two_per_parameter(const nn::ParameterStore& store) {
  return std::vector<int64_t>(store.all().size(), 2);
}

}  // namespace

Lamb::Lamb(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
           std::span<const Segment> layout, const ShardReduction* reduction)
    : config_(config), reduction_(reduction), norms_(two_per_parameter(store)) {
  TS_CHECK(config.beta1 >= 0.0f && config.beta1 < 1.0f && config.beta2 >= 0.0f && config.beta2 < 1.0f,
           "LAMB: betas ({}, {}) must be in [0, 1)", config.beta1, config.beta2);
  const int64_t owned = total_elements(layout);
  m_ = Tensor::zeros({owned}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({owned}, DType::F32, MemoryTag::Optimizer, memory);
}

void Lamb::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(total_elements(segments) == owned_elements(),
           "LAMB: the segments hold {} elements but its state covers {}: the owned elements changed",
           total_elements(segments), owned_elements());
  ++step_;
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const auto w1 = static_cast<float>(1.0 - double(b1)), w2 = static_cast<float>(1.0 - double(b2));
  const auto unbias1 = static_cast<float>(1.0 / (1.0 - std::pow(double(b1), double(step_))));
  const auto unbias2 = static_cast<float>(1.0 / (1.0 - std::pow(double(b2), double(step_))));
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  // The update direction, from the moments already advanced: the same expression in both passes,
  // so the norm is of exactly the update applied.
  auto direction = [&](float mi, float vi, float w, float wd) {
    return (mi * unbias1) / (std::sqrt(vi * unbias2) + eps) + wd * w;
  };

  norms_.clear();
  int64_t at = 0;
  for (const Segment& s : segments) {
    const bool adapted = is_weight(*s.param);
    const float wd = adapted ? config_.weight_decay : 0.0f;
    double w_squares = 0, u_squares = 0;
    for (int64_t i = 0; i < s.size(); ++i) {
      const float g = s.grad[i];
      float& mi = m[at + i];
      float& vi = v[at + i];
      mi = b1 * mi + w1 * g;
      vi = b2 * vi + w2 * g * g;
      if (adapted) {
        const float u = direction(mi, vi, s.value[i], wd);
        w_squares += double(s.value[i]) * double(s.value[i]);
        u_squares += double(u) * double(u);
      }
    }
    std::span<double> sums = norms_.of(*s.param);
    sums[0] += w_squares;
    sums[1] += u_squares;
    at += s.size();
  }
  norms_.reduce(reduction_, segments);

  at = 0;
  for (const Segment& s : segments) {
    const bool adapted = is_weight(*s.param);
    const float wd = adapted ? config_.weight_decay : 0.0f;
    std::span<const double> sums = norms_.of(*s.param);
    const double ratio = adapted && sums[0] > 0 && sums[1] > 0 ? std::sqrt(sums[0]) / std::sqrt(sums[1]) : 1.0;
    const auto step_size = static_cast<float>(double(lr) * (adapted ? ratio : double(config_.unadapted_lr_scale)));
    for (int64_t i = 0; i < s.size(); ++i) {
      s.value[i] -= step_size * direction(m[at + i], v[at + i], s.value[i], wd);
    }
    at += s.size();
  }
}

StateDict Lamb::state_dict() { return {step_, {{"m", m_, {}}, {"v", v_, {}}}}; }

void Lamb::load_state_dict(StateDict state) {
  load_state_tensor(state, "m", m_, name());
  load_state_tensor(state, "v", v_, name());
  step_ = state.steps;
}

}  // namespace tessera::optim
