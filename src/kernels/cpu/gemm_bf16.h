#pragma once
// bf16 × bf16 → f32 matrix multiply, row-major: c[M,N] (ldc) = op(a)[M,K] (lda) · op(b)[K,N] (ldb),
// plus c when accumulating. A product of two bf16 values is exact in f32 and the sums run in f32,
// so the result differs from an f32 GEMM of the same (bf16-rounded) inputs only by summation order.
//
// Two paths, chosen by the CPU at run time (detect_bf16_gemm_path):
//   - OneDnn: oneDNN's matmul primitive on bf16 inputs. Where the CPU has bf16 dot products
//     (AVX512_BF16: vdpbf16ps) its JIT kernels do two multiply-adds per f32 lane per instruction,
//     twice the f32 FMA rate (bench/gemm_bf16.cpp measures it).
//   - WidenToF32: the inputs widened to f32 and multiplied by the f32 GEMM (kernels/cpu/matmul.h).
//     Exact as well, at f32 speed: the path for CPUs without bf16 dot products, where oneDNN would
//     emulate them.
// Shapes: M, N, K as in c[M,N] = op(a)[M,K] · op(b)[K,N].
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace tessera::kernels {

enum class Bf16GemmPath { OneDnn, WidenToF32 };
const char* bf16_gemm_path_name(Bf16GemmPath path);  // "onednn-bf16", "widen-to-f32"

// Whether this CPU does bf16 dot products in hardware (the AVX512_BF16 feature).
bool cpu_has_bf16_dot_products();
// The path this CPU should use: OneDnn where it has bf16 dot products, else WidenToF32.
Bf16GemmPath detect_bf16_gemm_path();

// One GEMM engine. OneDnn builds a primitive per distinct call shape (the first call of a shape
// costs a JIT compilation, well under a millisecond; later calls reuse it); WidenToF32 keeps the
// widened inputs' scratch. Not for concurrent use: one object per thread that multiplies.
class Bf16Gemm {
 public:
  explicit Bf16Gemm(Bf16GemmPath path);
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  Bf16GemmPath path() const { return path_; }
  // What runs: the path's name and, for oneDNN, the implementation it chose for the last shape
  // ("onednn-bf16 (brg:avx512_core_bf16)").
  std::string describe() const;

  //   a: [M,K] (lda), or [K,M] when ta == Yes;  b: [K,N] (ldb), or [N,K] when tb == Yes.
  void multiply(Transpose ta, Transpose tb, int M, int N, int K, const bf16* a, int lda, const bf16* b, int ldb,
                float* c, int ldc, bool accumulate);

 private:
  struct OneDnn;
  Bf16GemmPath path_;
  std::unique_ptr<OneDnn> onednn_;
  std::vector<float> wide_a_, wide_b_;
};

}  // namespace tessera::kernels
