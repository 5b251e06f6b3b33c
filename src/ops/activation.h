#pragma once
// Elementwise activations of the MLP. Every tensor of one call has the same shape, any shape
// ([N.., F] in the models: rows by hidden features). Gradients are written (=).
#include "core/tensor.h"

namespace tessera::ops {

// y = gelu(x), the tanh approximation (GPT-2).
void gelu_forward(const Tensor& y, const Tensor& x);
// dx = gelu'(x) · dy.
void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy);

// y = max(x, 0).
void relu_forward(const Tensor& y, const Tensor& x);
// dx = (x > 0) · dy.
void relu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy);

// y = max(x, 0)^2, squared ReLU (Primer).
void relu2_forward(const Tensor& y, const Tensor& x);
// dx = 2 max(x, 0) · dy.
void relu2_backward(const Tensor& dx, const Tensor& x, const Tensor& dy);

// y = silu(gate) · up (Llama's gated MLP).
void swiglu_forward(const Tensor& y, const Tensor& gate, const Tensor& up);
// dgate and dup from dy and the forward's gate and up.
void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up);

}  // namespace tessera::ops
