#include "optim/lamb.h"

#include <cmath>

#include "ops/optimizer_update.h"

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
  // Both passes take the same update direction (ops::lamb_moments, ops::lamb_apply), so the norm is
  // of exactly the update applied.
  auto hyper = [&](bool adapted) {
    return ops::LambStep{config_.beta1, config_.beta2, config_.eps, adapted ? config_.weight_decay : 0.0f, step_};
  };

  norms_.clear();
  int64_t at = 0;
  for (const Segment& s : segments) {
    const bool adapted = is_weight(*s.param);
    const ops::SquareSums squares = ops::lamb_moments(s.values(), s.grads(), m_.slice(0, at, at + s.size()),
                                                      v_.slice(0, at, at + s.size()), hyper(adapted), adapted);
    std::span<double> sums = norms_.of(*s.param);
    sums[0] += squares.first;
    sums[1] += squares.second;
    at += s.size();
  }
  norms_.reduce(reduction_, segments);

  at = 0;
  for (const Segment& s : segments) {
    const bool adapted = is_weight(*s.param);
    std::span<const double> sums = norms_.of(*s.param);
    const double ratio = adapted && sums[0] > 0 && sums[1] > 0 ? std::sqrt(sums[0]) / std::sqrt(sums[1]) : 1.0;
    const auto step_size = static_cast<float>(double(lr) * (adapted ? ratio : double(config_.unadapted_lr_scale)));
    ops::lamb_apply(s.values(), m_.slice(0, at, at + s.size()), v_.slice(0, at, at + s.size()), hyper(adapted),
                    step_size);
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
