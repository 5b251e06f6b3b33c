#pragma once
// General matrix multiply on BLAS (OpenBLAS sgemm/dgemm), row-major; one-row products as matrix-vector loops.
// Shapes: M, N, K as in out[M,N] = op(a)[M,K] · op(b)[K,N].
namespace tessera::kernels {

enum class Transpose { No, Yes };

// out[M,N] = (accumulate ? out : 0) + op(a)[M,K] · op(b)[K,N] (+ bias[N] on every row).
//   a: [M,K], or [K,M] when ta == Yes;  b: [K,N], or [N,K] when tb == Yes;  bias: [N] or null.
// Called outside an OpenMP parallel region it uses all OpenMP threads; inside one, one thread.
// One row (M = 1, a not transposed: decoding one token) is a matrix-vector product instead, its
// own loops, split over threads only for matrices of 2^21 elements or more.
template <class T>
void matmul(T* out, const T* a, const T* b, const T* bias, int M, int N, int K, Transpose ta, Transpose tb,
            bool accumulate);

// The BLAS call itself, with explicit leading dimensions, for kernels that multiply sub-blocks of
// larger arrays (attention tiles): c[M,N] (ldc) = alpha · op(a)[M,K] (lda) · op(b)[K,N] (ldb) + beta · c.
template <class T>
void gemm(Transpose ta, Transpose tb, int M, int N, int K, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc);

}  // namespace tessera::kernels
