#include "kernels/cpu/sgd.h"

namespace tessera::kernels {

void sgd_update(float* param, const float* grad, float* momentum, size_t n, float lr, float mu, float weight_decay,
                bool decoupled_weight_decay, bool nesterov) {
  // Formed in double and rounded once, as PyTorch does with its Python-float hyperparameters.
  const auto decay = static_cast<float>(1.0 - double(lr) * double(weight_decay));
  const float l2 = decoupled_weight_decay ? 0.0f : weight_decay;
  float* p = param;
  const float* g = grad;
  float* b = momentum;
  for (size_t i = 0; i < n; ++i) {
    if (decoupled_weight_decay && weight_decay != 0.0f) p[i] *= decay;
    float d = l2 != 0.0f ? g[i] + l2 * p[i] : g[i];
    if (b != nullptr) {
      b[i] = b[i] * mu + d;
      d = nesterov ? d + mu * b[i] : b[i];
    }
    p[i] = p[i] + (-lr) * d;
  }
}

}  // namespace tessera::kernels
