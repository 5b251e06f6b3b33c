#pragma once
// Normalizations over the last dimension: C channels, N.. rows (any leading dimensions, usually
// [B, T]). The per-row statistics the forward saves (mean, rstd) are shaped like x without its
// last dimension, or flat [N]. An undefined tensor means "none" for the optional arguments.
// Parameter gradients accumulate (+=), input gradients are written (=). mean, rstd and the
// parameter gradients are f32 whatever the dtype of x, y, w and b (bf16 and f16 compute in f32).
#include "core/tensor.h"

namespace tessera::ops {

// y [N.., C] = (x - mean) · rstd · w [C] + b [C] (b optional); saves mean [N..] and rstd [N..].
void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                       const Tensor& b, float eps);
// dx [N.., C] written (optional); dw [C] +=; db [C] += (optional). mean, rstd: the forward's.
void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);

// y [N.., C] = x · rstd · w [C], rstd = 1 / sqrt(mean(x²) + eps); saves rstd [N..].
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
// dx [N.., C] written (optional); dw [C] +=. rstd: the forward's.
void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd);

}  // namespace tessera::ops
