#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {
template <class T>
struct Scalars {
  T decay, step_size, bc2_sqrt, w1, w1_complement, b2, w2, eps;
};

// One block of the update. Scalars come by value, so the vectorizer sees loop invariants; the
// lerp form is a template parameter, since a select inside this mixed float/double loop would
// stop it from vectorizing.
template <class T, bool kLerpFromStart>
void update_block(T* param, const T* grad, T* m, T* v, size_t lo, size_t hi, const Scalars<T> k) {
#pragma omp simd
  for (size_t i = lo; i < hi; ++i) {
    const T g = grad[i];
    const T p = param[i] * k.decay;
    // torch.lerp(m, g, w): m + w (g - m) for w < 0.5, else g - (g - m)(1 - w).
    const T mi = kLerpFromStart ? m[i] + k.w1 * (g - m[i]) : g - (g - m[i]) * k.w1_complement;
    const T vi = v[i] * k.b2 + k.w2 * g * g;
    // vsqrt: the library sqrt would keep this loop scalar (see vec_math.h).
    const T denom = detail::vsqrt<T>(vi) / k.bc2_sqrt + k.eps;
    param[i] = p - k.step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}
}  // namespace

template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, int64_t variance_frozen_at) {
  TS_CHECK(step >= 1, "adamw_update: step = {} must count from 1 (bias correction divides by 1 - beta^step)", step);
  TS_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
           "adamw_update: betas ({}, {}) must be in [0, 1)", beta1, beta2);
  // Scalars are formed in double and rounded once, as PyTorch does with its Python-float
  // hyperparameters; the per-element operations then follow its order.
  const double lr_d = lr;
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  TS_CHECK(variance_frozen_at >= 0 && variance_frozen_at < step,
           "adamw_update: the variance frozen at step {} must be a step before this one ({})", variance_frozen_at, step);
  const bool frozen = variance_frozen_at > 0;
  const double bias_correction2 =
      1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(frozen ? variance_frozen_at : step));
  Scalars<T> k{};
  k.decay = static_cast<T>(1.0 - lr_d * static_cast<double>(weight_decay));
  k.step_size = static_cast<T>(lr_d / bias_correction1);
  k.bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  k.w1 = static_cast<T>(1.0 - static_cast<double>(beta1));
  k.w1_complement = T(1) - k.w1;
  // A frozen v is v·1 + 0·g²: the same loop, bit for bit v.
  k.b2 = frozen ? T(1) : static_cast<T>(beta2);
  k.w2 = frozen ? T(0) : static_cast<T>(1.0 - static_cast<double>(beta2));
  k.eps = static_cast<T>(eps);
  if (1.0 - static_cast<double>(beta1) < 0.5) {
    detail::for_element_blocks(n, 2,
                               [&](size_t lo, size_t hi) { update_block<T, true>(param, grad, m, v, lo, hi, k); });
  } else {
    detail::for_element_blocks(n, 2,
                               [&](size_t lo, size_t hi) { update_block<T, false>(param, grad, m, v, lo, hi, k); });
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, float, float, float, float, float,
                                  int64_t, int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, size_t, float, float, float, float, float,
                                   int64_t, int64_t);

}  // namespace tessera::kernels
