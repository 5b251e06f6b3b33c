#pragma once
// AdamW update with decoupled weight decay, PyTorch torch.optim.AdamW semantics (non-amsgrad):
//   p -= lr * wd * p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps),  t = step >= 1.
// With variance_frozen_at = T > 0 the second moment stays as it was after step T and keeps that
// step's bias correction (v untouched; sqrt(1 - beta2^T)): the update is then linear in the
// gradient, which is what lets compressed gradients with error feedback sum to the exact ones
// (1-bit Adam's observation, Tang et al. 2021).
// Shapes: n elements of param, grad, m, v.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, int64_t variance_frozen_at = 0);

}  // namespace tessera::kernels
