#pragma once
// General matrix multiply, row-major: float by oneDNN's or OpenBLAS's sgemm (the faster on this
// machine, chosen by measurement: kernels/cpu/gemm_choice.h), double by OpenBLAS's dgemm; one-row
// products as matrix-vector loops.
// 16-bit operands (bf16, f16) are multiplied with f32 sums: by oneDNN's bf16 GEMM where the CPU
// has bf16 dot products, else widened to f32 and multiplied as floats (kernels/cpu/gemm_bf16.h).
// Shapes: M, N, K as in out[M,N] = op(a)[M,K] · op(b)[K,N].
#include <cstdint>
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

// The libraries that can run the float GEMM.
enum class FloatGemmLibrary : uint8_t { OneDnn, OpenBlas };
// "onednn-sgemm", "openblas-sgemm".
std::string_view float_gemm_library_name(FloatGemmLibrary library);

// How a process makes its float products: by which library, and cut into blocks of about `block`
// rows (or columns) of the result along its longer side, one library call each (matmul.cpp says
// why tessera cuts them). Wider blocks repack the other operand fewer times; narrower ones leave
// more blocks for many threads to share. The bits follow both, never the thread count.
inline constexpr int kNarrowGemmBlock = 256;
inline constexpr int kWideGemmBlock = 1024;
struct FloatGemm {
  FloatGemmLibrary provider = FloatGemmLibrary::OneDnn;  // the library whose sgemm runs the blocks
  int block = kNarrowGemmBlock;
  bool operator==(const FloatGemm&) const = default;
};
// "onednn-sgemm", or with blocks other than the narrow ones "onednn-sgemm/1024".
std::string float_gemm_name(FloatGemm gemm);

// Which float GEMM this process runs: oneDNN's in narrow blocks until a run chooses (at start-up,
// before any product; kernels/cpu/gemm_choice.h). Process-wide, as the BLAS's thread count is. A
// speed measured once and stored (the MFU peak, train/peak_flops.h) belongs to it: its name is in
// the stored key.
void use_float_gemm(FloatGemm gemm);
FloatGemm float_gemm();
FloatGemmLibrary float_gemm_library();  // float_gemm().provider
std::string float_gemm_name();          // of float_gemm()

// One float product out[M,N] = op(a)·op(b) exactly as matmul makes it under `gemm` (the same
// blocks, the same library), rather than under the chosen one: what the choice measures.
void float_matmul_by(FloatGemm gemm, float* out, const float* a, const float* b, int M, int N, int K, Transpose ta,
                     Transpose tb);

// Which 16-bit GEMM runs on this thread: "onednn-bf16 (<oneDNN's implementation>)" or
// "widen-to-f32" (kernels/cpu/gemm_bf16.h).
std::string half_gemm_description();

// The BLAS call itself, with explicit leading dimensions, for kernels that multiply sub-blocks of
// larger arrays (attention tiles): c[M,N] (ldc) = alpha · op(a)[M,K] (lda) · op(b)[K,N] (ldb) + beta · c.
template <class T>
void gemm(Transpose ta, Transpose tb, int M, int N, int K, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc);

}  // namespace tessera::kernels
