#include "memory/loss_scaler.h"

#include <cmath>

#include "core/check.h"

namespace tessera::memory {

namespace {
// Below 1 the scale would shrink the gradients it is there to lift; one overflowing step after
// another (a model that diverged) would otherwise drive it to zero and every later step skipped.
constexpr double kMinScale = 1.0;
// fp16's largest finite value: a larger scale overflows every gradient of the loss's own size.
constexpr double kMaxScale = 65504.0 * 65536.0;
}  // namespace

LossScaler::LossScaler(const config::LossScaling& options) : options_(options) {
  TS_CHECK(!options.enabled || (std::isfinite(options.init_scale) && options.init_scale >= kMinScale),
           "loss scale {} must be at least {}", options.init_scale, kMinScale);
  state_.scale = options.enabled ? options.init_scale : 1.0;
}

void LossScaler::update(bool finite) {
  if (!finite) ++state_.skipped_steps;
  if (!enabled()) return;
  if (!finite) {
    state_.finite_steps = 0;
    if (options_.dynamic) state_.scale = std::max(kMinScale, state_.scale * options_.backoff_factor);
    return;
  }
  ++state_.finite_steps;
  if (options_.dynamic && state_.finite_steps >= options_.growth_interval) {
    state_.scale = std::min(kMaxScale, state_.scale * options_.growth_factor);
    state_.finite_steps = 0;
  }
}

void LossScaler::restore(const State& state) {
  TS_CHECK(std::isfinite(state.scale) && state.scale >= kMinScale && state.scale <= kMaxScale,
           "loss scale {} in the checkpoint is outside [{}, {}]", state.scale, kMinScale, kMaxScale);
  TS_CHECK(state.finite_steps >= 0 && state.skipped_steps >= 0,
           "loss-scaling counters in the checkpoint are negative ({} finite steps, {} skipped)", state.finite_steps,
           state.skipped_steps);
  state_ = state;
}

}  // namespace tessera::memory
