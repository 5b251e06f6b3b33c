#include "kernels/cpu/lars.h"

namespace tessera::kernels {

LarsSquares lars_squares(const float* param, const float* grad, size_t n) {
  double w_squares = 0, g_squares = 0;
  for (size_t i = 0; i < n; ++i) {
    w_squares += double(param[i]) * double(param[i]);
    g_squares += double(grad[i]) * double(grad[i]);
  }
  return {w_squares, g_squares};
}

void lars_update(float* param, const float* grad, float* momentum, size_t n, float scale, float weight_decay,
                 float mu) {
  float* b = momentum;
  for (size_t i = 0; i < n; ++i) {
    const float d = scale * (grad[i] + weight_decay * param[i]);
    if (b != nullptr) {
      b[i] = mu * b[i] + d;
      param[i] -= b[i];
    } else {
      param[i] -= d;
    }
  }
}

}  // namespace tessera::kernels
