#pragma once
// AdamW update with decoupled weight decay, PyTorch torch.optim.AdamW semantics (non-amsgrad):
//   p -= lr * wd * p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps),  t = step >= 1.
// Shapes: n elements of param, grad, m, v.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step);

}  // namespace tessera::kernels
