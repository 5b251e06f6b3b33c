#pragma once
// Linear warmup to the peak rate, then cosine decay to the floor at the last step.
//
// A run resumed with another schedule length (train.steps, with train.allow_changes) continues
// its decay from where the rate was instead of jumping back up the cosine (or warming again):
// from `restart_step` on, the rate falls by a cosine from `restart_rate` to the floor at the new
// last step. The restart is saved with every checkpoint after it, so a later resume of the same
// run follows it bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tessera::optim {

struct WarmupCosine {
  float peak = 1e-3f;
  float floor = 1e-4f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  int64_t restart_step = -1;  // -1: no restart
  float restart_rate = 0;

  // Rate for 0-based step s.
  float at(int64_t s) const {
    if (restart_step >= 0 && s >= restart_step) {
      if (total_steps - 1 <= restart_step) return floor;
      const double progress = std::min(
          1.0, static_cast<double>(s - restart_step) / static_cast<double>(total_steps - 1 - restart_step));
      return static_cast<float>(floor + (restart_rate - floor) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress)));
    }
    if (s < warmup_steps) return peak * static_cast<float>(s + 1) / static_cast<float>(warmup_steps);
    if (total_steps <= warmup_steps + 1) return peak;
    double progress = static_cast<double>(s - warmup_steps) / static_cast<double>(total_steps - 1 - warmup_steps);
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
    return static_cast<float>(floor + (peak - floor) * cosine);
  }
};

}  // namespace tessera::optim
