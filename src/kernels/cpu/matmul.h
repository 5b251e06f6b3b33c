#pragma once
// General matrix multiply, row-major: float by oneDNN's sgemm, double by OpenBLAS's dgemm; one-row
// products as matrix-vector loops.
// 16-bit operands (bf16, f16) are multiplied with f32 sums: by oneDNN's bf16 GEMM where the CPU
// has bf16 dot products, else widened to f32 and multiplied as floats (kernels/cpu/gemm_bf16.h).
// Shapes: M, N, K as in out[M,N] = op(a)[M,K] · op(b)[K,N].
#include <string>
#include <string_view>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

enum class Transpose { No, Yes };

// out[M,N] = (accumulate ? out : 0) + op(a)[M,K] · op(b)[K,N] (+ bias[N] on every row).
//   a: [M,K], or [K,M] when ta == Yes;  b: [K,N], or [N,K] when tb == Yes;  bias: [N] or null.
// Called outside an OpenMP parallel region it uses all OpenMP threads; inside one, one thread.
// One row (M = 1, a not transposed: decoding one token) is a matrix-vector product instead, its
// own loops, split over threads only for matrices of 2^21 elements or more.
// Out is T, or float for 16-bit T (a weight gradient accumulating in f32): the sums run in f32 and
// are rounded to T once, at the end.
template <class T, class Out = T>
void matmul(Out* out, const T* a, const T* b, const T* bias, int M, int N, int K, Transpose ta, Transpose tb,
            bool accumulate);

// Which library runs the float GEMM ("onednn-sgemm"): a speed measured once and stored (the MFU
// peak, train/peak_flops.h) belongs to it, and is measured again when it changes.
std::string_view float_gemm_name();

// Which 16-bit GEMM runs on this thread: "onednn-bf16 (<oneDNN's implementation>)" or
// "widen-to-f32" (kernels/cpu/gemm_bf16.h).
std::string half_gemm_description();

// The BLAS call itself, with explicit leading dimensions, for kernels that multiply sub-blocks of
// larger arrays (attention tiles): c[M,N] (ldc) = alpha · op(a)[M,K] (lda) · op(b)[K,N] (ldb) + beta · c.
template <class T>
void gemm(Transpose ta, Transpose tb, int M, int N, int K, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc);

}  // namespace tessera::kernels
