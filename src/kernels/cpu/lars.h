#pragma once
// LARS (You et al. 2017) in two passes over a run of one tensor's elements: the trust ratio needs
// the norms of the whole tensor (summed over its runs and ranks) before any element moves.
//   lars_squares: Σ w² and Σ g², in double, in element order.
//   lars_update: d = scale·(g + wd·w), scale = lr × the tensor's local rate; with momentum mu > 0,
//     b = mu·b + d and w -= b, else w -= d.
// Shapes: n elements of param, grad and momentum; momentum null without momentum.
#include <cstddef>

namespace tessera::kernels {

struct LarsSquares {
  double weights = 0;
  double grads = 0;
};

LarsSquares lars_squares(const float* param, const float* grad, size_t n);
void lars_update(float* param, const float* grad, float* momentum, size_t n, float scale, float weight_decay, float mu);

}  // namespace tessera::kernels
