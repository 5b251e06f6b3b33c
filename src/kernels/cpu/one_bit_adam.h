#pragma once
// 1-bit Adam's own per-element steps (Tang et al. 2021; optim/one_bit_adam.h), once its variance
// is frozen. Shapes: n elements of every pointer.
#include <cstddef>

namespace tessera::kernels {

// The local momentum from this rank's local-batch mean gradient: m = beta1·m + (1 - beta1)·(R·g),
// R the ranks whose gradients sum to the global batch's mean.
void one_bit_adam_momentum(float* m, const float* grad, size_t n, float beta1, float ranks);
// Adam's update with the frozen second moment: p = p·decay - step_size·m / (√v / bias2_sqrt + eps).
void one_bit_adam_apply(float* param, const float* m, const float* v, size_t n, float step_size, float bias2_sqrt,
                        float eps, float decay);

}  // namespace tessera::kernels
