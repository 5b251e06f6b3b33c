#pragma once
// SGD update, PyTorch torch.optim.SGD semantics (dampening 0, maximize off): with decoupled weight
// decay p *= 1 - lr·wd first, else the L2 term wd·p joins the gradient, d = g + wd·p; with momentum
// mu > 0, b = mu·b + d (b starts at zero, so the first step's buffer is d itself, as PyTorch's
// clone) and d = Nesterov ? d + mu·b : b; then p -= lr·d.
// Shapes: n elements of param, grad and momentum; momentum null for plain SGD.
#include <cstddef>

namespace tessera::kernels {

void sgd_update(float* param, const float* grad, float* momentum, size_t n, float lr, float mu, float weight_decay,
                bool decoupled_weight_decay, bool nesterov);

}  // namespace tessera::kernels
