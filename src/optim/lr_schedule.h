#pragma once
// Linear warmup to the peak rate, then cosine decay to the floor at the last step.
#include <cmath>
#include <cstdint>

namespace tessera::optim {

struct WarmupCosine {
  float peak = 1e-3f;
  float floor = 1e-4f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // Rate for 0-based step s.
  float at(int64_t s) const {
    if (s < warmup_steps) return peak * static_cast<float>(s + 1) / static_cast<float>(warmup_steps);
    if (total_steps <= warmup_steps + 1) return peak;
    double progress = static_cast<double>(s - warmup_steps) / static_cast<double>(total_steps - 1 - warmup_steps);
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
    return static_cast<float>(floor + (peak - floor) * cosine);
  }
};

}  // namespace tessera::optim
