#include "kernels/cpu/one_bit_adam.h"

#include <cmath>

namespace tessera::kernels {

void one_bit_adam_momentum(float* m, const float* grad, size_t n, float beta1, float ranks) {
  for (size_t i = 0; i < n; ++i) m[i] = beta1 * m[i] + (1.0f - beta1) * (ranks * grad[i]);
}

void one_bit_adam_apply(float* param, const float* m, const float* v, size_t n, float step_size, float bias2_sqrt,
                        float eps, float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    param[i] = param[i] * decay - step_size * m[i] / denom;
  }
}

}  // namespace tessera::kernels
