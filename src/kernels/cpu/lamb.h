#pragma once
// LAMB (You et al. 2019) in two passes over a run of one tensor's elements, since the trust ratio
// needs the norms of the whole tensor (summed over every run of it, and over the ranks that hold
// its other runs) before any element moves:
//   lamb_moments: m = b1·m + (1 - b1)·g, v = b2·v + (1 - b2)·g²; returns Σ w² and Σ u² of the
//     weights and of the update direction u = m̂ / (√v̂ + eps) + wd·w (when `adapted`: weights
//     that take the trust ratio; else the sums are zero), in double, in element order.
//   lamb_apply: w -= step_size · u, step_size = lr · ‖w‖ / ‖u‖ (or lr times the scale of an
//     unadapted tensor), from the moments lamb_moments advanced.
// m̂ = m / (1 - b1^step), v̂ = v / (1 - b2^step); the direction is the same expression in both
// passes, so the norm is of exactly the update applied. Shapes: n elements of param, grad, m, v.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

struct LambSquares {
  double weights = 0;
  double directions = 0;
};

LambSquares lamb_moments(const float* param, const float* grad, float* m, float* v, size_t n, float beta1, float beta2,
                         float eps, float weight_decay, int64_t step, bool adapted);
void lamb_apply(float* param, const float* m, const float* v, size_t n, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float step_size);

}  // namespace tessera::kernels
