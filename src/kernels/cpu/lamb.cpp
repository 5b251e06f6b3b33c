#include "kernels/cpu/lamb.h"

#include <cmath>

namespace tessera::kernels {

namespace {

// The bias corrections as factors, formed in double and rounded once.
struct Unbias {
  float first, second;
};

Unbias unbias(float beta1, float beta2, int64_t step) {
  return {static_cast<float>(1.0 / (1.0 - std::pow(double(beta1), double(step)))),
          static_cast<float>(1.0 / (1.0 - std::pow(double(beta2), double(step))))};
}

inline float direction(float mi, float vi, float w, float wd, Unbias k, float eps) {
  return (mi * k.first) / (std::sqrt(vi * k.second) + eps) + wd * w;
}

}  // namespace

LambSquares lamb_moments(const float* param, const float* grad, float* m, float* v, size_t n, float beta1, float beta2,
                         float eps, float weight_decay, int64_t step, bool adapted) {
  const float b1 = beta1, b2 = beta2;
  const auto w1 = static_cast<float>(1.0 - double(b1)), w2 = static_cast<float>(1.0 - double(b2));
  const Unbias k = unbias(beta1, beta2, step);
  double w_squares = 0, u_squares = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    float& mi = m[i];
    float& vi = v[i];
    mi = b1 * mi + w1 * g;
    vi = b2 * vi + w2 * g * g;
    if (adapted) {
      const float u = direction(mi, vi, param[i], weight_decay, k, eps);
      w_squares += double(param[i]) * double(param[i]);
      u_squares += double(u) * double(u);
    }
  }
  return {w_squares, u_squares};
}

void lamb_apply(float* param, const float* m, const float* v, size_t n, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float step_size) {
  const Unbias k = unbias(beta1, beta2, step);
  for (size_t i = 0; i < n; ++i) param[i] -= step_size * direction(m[i], v[i], param[i], weight_decay, k, eps);
}

}  // namespace tessera::kernels
