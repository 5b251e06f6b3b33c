#include "kernels/cpu/matmul.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

namespace {
CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::Yes ? CblasTrans : CblasNoTrans; }

// The library of the single-precision products. Which is faster depends on the CPU, the thread
// count and the shapes: on an AMD EPYC of the first Zen generation one thread of OpenBLAS 0.3.21
// ran every product with 256 or fewer output columns at 8-10 GFLOP/s until the process had once
// made a wider one, where oneDNN ran them at 35-37 (docs/benchmarks.md, "One thread's GEMM"); on a
// Xeon with AVX-512, OpenBLAS told its SkylakeX core reached 310 GFLOP/s against oneDNN's 240. So
// the run measures both on its model's products at start-up (kernels/cpu/gemm_choice.h) and sets
// the faster here once, before its first step: process-wide, as the BLAS's own thread count is,
// because the products are made deep inside every op and the blocks below run on OpenMP's workers.
// oneDNN until someone chooses. Inside an active OpenMP region either library runs on the calling
// thread alone, which keeps the bits independent of the thread count. The blocks' width is chosen
// with it (kNarrowGemmBlock until then).
std::atomic<FloatGemmLibrary> chosen_float_library{FloatGemmLibrary::OneDnn};
std::atomic<int> chosen_float_block{kNarrowGemmBlock};

void blas_gemm(FloatGemmLibrary library, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (library == FloatGemmLibrary::OpenBlas) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const dnnl_status_t status = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', M, N, K, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  TS_CHECK(status == dnnl_success, "sgemm of {} x {} x {} (lda {}, ldb {}, ldc {}) failed in oneDNN with status {}", M,
           N, K, lda, ldb, ldc, static_cast<int>(status));
}
// Doubles (the tests' references) always go to OpenBLAS: oneDNN has no dgemm.
void blas_gemm(FloatGemmLibrary, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A matrix-vector product reads each weight once and is bound by memory, a few tens of
// microseconds for a layer of a small model: splitting that over threads gains little and, on a
// busy machine, costs a wait for a descheduled thread at every region's end. (On a busy 2-core
// machine, 200 tokens of the default model took 0.15 s with 1 thread, 4.2 s with 2 threads and
// the BLAS's threaded gemv, 0.4 to 1.2 s with 2 threads and this one.) Only matrices of at least
// this many elements (8 MiB in float) are split.
constexpr size_t kMatvecParallelWork = size_t{1} << 21;

// out[N] (+)= b[N,K] · a[K]: one dot product per output, each computed by one thread in a fixed
// order, so the bits do not depend on the number of threads. (Four rows at a time, for four
// independent sums, measured no faster: the loop streams the matrix at the memory's pace.)
template <class T>
void matvec_rows(T* out, const T* a, const T* b, int N, int K, bool accumulate) {
  const size_t k = static_cast<size_t>(K);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * k >= kMatvecParallelWork && \
                                                  detail::worth_parallel(static_cast<size_t>(N) * k))
  for (int n = 0; n < N; ++n) {
    const T* row = b + static_cast<size_t>(n) * k;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < k; ++i) sum += row[i] * a[i];
    out[n] = accumulate ? out[n] + sum : sum;
  }
}

// out[N] (+)= b[K,N]ᵀ · a[K]: rows of b scaled and added, each thread owning a range of columns
// and adding the rows in order.
template <class T>
void matvec_columns(T* out, const T* a, const T* b, int N, int K, bool accumulate) {
  const size_t work = static_cast<size_t>(N) * static_cast<size_t>(K);
  auto columns = [&](int c0, int c1) {
    if (!accumulate) std::fill(out + c0, out + c1, T(0));
    for (int i = 0; i < K; ++i) {
      const T* row = b + static_cast<size_t>(i) * N;
      const T ai = a[i];
#pragma omp simd
      for (int j = c0; j < c1; ++j) out[j] += ai * row[j];
    }
  };
  if (work >= kMatvecParallelWork) {
    detail::for_column_ranges(N, work, columns);
  } else {
    columns(0, N);
  }
}
// OpenBLAS splits a product among its threads by itself, and the tiles at the edges of its split
// run other micro-kernels than the inner ones, which round differently: the bits of C depended on
// the number of threads (seen with OpenBLAS 0.3.21's Haswell kernels at 300 x 70 x 64, on 2 and 3
// threads against 1). So the split is tessera's: C cut into blocks along its longer side, the cut
// a function of the shape and the chosen block width alone, each block one BLAS call. Inside an
// active OpenMP region the BLAS runs single-threaded, so each block is computed the same way
// whatever the thread count. Each block repacks the other operand, so wider blocks pack less: on a
// Zen 3 EPYC's two cores the GPT-2 124M step took 6.96 s with oneDNN in blocks of 1024 against
// 7.77 s with OpenBLAS in blocks of 256, the faster library in those (docs/benchmarks.md). Narrow
// blocks leave more of them for many threads; so the width is measured with the library
// (kernels/cpu/gemm_choice.h). Their count is rounded up to an even number so two threads get
// equal shares.
int gemm_blocks(int size, int width) {
  int blocks = (size + width - 1) / width;
  if (size >= 2 * 16 && blocks % 2 == 1) ++blocks;
  return std::max(1, std::min(blocks, size / 16));
}

template <class T>
void blocked_gemm(FloatGemm gemm, Transpose ta, Transpose tb, int M, int N, int K, const T* a, int lda, const T* b,
                  int ldb, T beta, T* c) {
  const FloatGemmLibrary library = gemm.provider;
  const bool by_rows = M >= N;
  const int size = by_rows ? M : N;
  const int blocks = gemm_blocks(size, gemm.block);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < blocks; ++i) {
    // Block edges on multiples of 16, the micro-kernels' widths.
    const int begin = std::min(size, (static_cast<int>(int64_t{size} * i / blocks) + 15) / 16 * 16);
    const int end = i + 1 == blocks ? size : std::min(size, (static_cast<int>(int64_t{size} * (i + 1) / blocks) + 15) / 16 * 16);
    if (begin >= end) continue;
    if (by_rows) {
      // Rows [begin, end) of C and of op(a): a is [M, K] (row offset) or [K, M] (column offset).
      const T* a_block = ta == Transpose::No ? a + static_cast<size_t>(begin) * lda : a + begin;
      blas_gemm(library, to_cblas(ta), to_cblas(tb), end - begin, N, K, T(1), a_block, lda, b, ldb, beta,
                c + static_cast<size_t>(begin) * N, N);
    } else {
      // Columns [begin, end) of C and of op(b): b is [K, N] (column offset) or [N, K] (row offset).
      const T* b_block = tb == Transpose::No ? b + begin : b + static_cast<size_t>(begin) * ldb;
      blas_gemm(library, to_cblas(ta), to_cblas(tb), M, end - begin, K, T(1), a, lda, b_block, ldb, beta, c + begin,
                N);
    }
  }
}
}  // namespace

template <class T>
void gemm(Transpose ta, Transpose tb, int M, int N, int K, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc) {
  if (M == 0 || N == 0) return;
  blas_gemm(float_gemm_library(), to_cblas(ta), to_cblas(tb), M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
template <class T>
void float_matmul(FloatGemm gemm, T* out, const T* a, const T* b, const T* bias, int M, int N, int K,
                  Transpose ta, Transpose tb, bool accumulate) {
  TS_CHECK(M >= 0 && N >= 0 && K >= 0, "matmul: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  TS_CHECK(out != nullptr && (K == 0 || (a != nullptr && b != nullptr)), "matmul: null operand for M={} N={} K={}", M,
           N, K);
  if (bias != nullptr) {
    // Broadcast the bias into out first, then let the GEMM accumulate on top of it: one extra
    // pass over out, tiny next to the K-fold work of the product.
    const size_t n = static_cast<size_t>(N);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(M) * n))
    for (int i = 0; i < M; ++i) {
      T* row = out + static_cast<size_t>(i) * n;
      if (accumulate) {
#pragma omp simd
        for (int j = 0; j < N; ++j) row[j] += bias[j];
      } else {
#pragma omp simd
        for (int j = 0; j < N; ++j) row[j] = bias[j];
      }
    }
    accumulate = true;
  }
  if (K == 0) {
    if (!accumulate) std::fill(out, out + static_cast<size_t>(M) * N, T(0));
    return;
  }
  // One row of a (decoding one token): a matrix-vector product. GEMM first packs all of b into
  // its panel layout, for that single row: the packing was 29% of a decoding step's time on the
  // default model.
  if (M == 1 && ta == Transpose::No) {
    if (tb == Transpose::Yes) {
      matvec_rows(out, a, b, N, K, accumulate);  // b [N, K]
    } else {
      matvec_columns(out, a, b, N, K, accumulate);  // b [K, N]
    }
    return;
  }
  // Row-major leading dimensions are the stored row lengths: [M,K] or [K,M] for a, [K,N] or [N,K] for b.
  const int lda = ta == Transpose::No ? K : M;
  const int ldb = tb == Transpose::No ? N : K;
  blocked_gemm<T>(gemm, ta, tb, M, N, K, a, std::max(1, lda), b, std::max(1, ldb), accumulate ? T(1) : T(0), out);
}

// The engine of the 16-bit products on this thread: oneDNN's primitives are cached per shape, and
// the widened operands' scratch is kept between calls. A cache, not state: any call gives the same
// result on a fresh engine.
Bf16Gemm& half_gemm_engine() {
  static thread_local Bf16Gemm engine(detect_bf16_gemm_path());
  return engine;
}

// The widened operands and the f32 result of a 16-bit product (scratch kept between calls).
struct HalfScratch {
  std::vector<float> a, b, c;
};
HalfScratch& half_scratch() {
  static thread_local HalfScratch scratch;
  return scratch;
}

// out (+)= op(a)·op(b) (+ bias) for 16-bit a and b, summed in f32: in out itself when Out is
// float (weight gradients), else in f32 scratch rounded into out once at the end.
template <class T, class Out>
void half_matmul(Out* out, const T* a, const T* b, const T* bias, int M, int N, int K, Transpose ta, Transpose tb,
                 bool accumulate) {
  HalfScratch& scratch = half_scratch();
  const size_t mn = static_cast<size_t>(M) * static_cast<size_t>(N);
  float* c = nullptr;
  if constexpr (std::is_same_v<Out, float>) {
    c = out;
  } else {
    c = scratch_of(scratch.c, mn);
    if (accumulate) widen<T>(c, out, mn);
  }
  if (bias != nullptr) {
    std::vector<float> wide_bias(static_cast<size_t>(N));
    widen<T>(wide_bias.data(), bias, wide_bias.size());
    for (int i = 0; i < M; ++i) {
      float* row = c + static_cast<size_t>(i) * N;
      for (int j = 0; j < N; ++j) row[j] = accumulate ? row[j] + wide_bias[j] : wide_bias[j];
    }
    accumulate = true;
  }
  const int lda = std::max(1, ta == Transpose::No ? K : M);
  const int ldb = std::max(1, tb == Transpose::No ? N : K);
  Bf16Gemm& engine = half_gemm_engine();
  const bool one_row = M == 1 && ta == Transpose::No;
  if constexpr (std::is_same_v<T, bf16>) {
    if (engine.path() == Bf16GemmPath::OneDnn && !one_row && K > 0) {
      engine.multiply(ta, tb, M, N, K, a, lda, b, ldb, c, N, accumulate);
      if constexpr (!std::is_same_v<Out, float>) narrow<T>(out, c, mn);
      return;
    }
  }
  // No 16-bit dot products here (or one row, a matrix-vector product): widen and use the f32
  // product, exact for the same reason the 16-bit one is (products of 16-bit values are exact).
  const size_t a_size = static_cast<size_t>(M) * static_cast<size_t>(K);
  const size_t b_size = static_cast<size_t>(K) * static_cast<size_t>(N);
  float* wide_a = scratch_of(scratch.a, a_size);
  float* wide_b = scratch_of(scratch.b, b_size);
  widen<T>(wide_a, a, a_size);
  widen<T>(wide_b, b, b_size);
  float_matmul<float>(float_gemm(), c, wide_a, wide_b, nullptr, M, N, K, ta, tb, accumulate);
  if constexpr (!std::is_same_v<Out, float>) narrow<T>(out, c, mn);
}
}  // namespace

template <class T, class Out>
void matmul(Out* out, const T* a, const T* b, const T* bias, int M, int N, int K, Transpose ta, Transpose tb,
            bool accumulate) {
  if constexpr (is_half_v<T>) {
    TS_CHECK(M >= 0 && N >= 0 && K >= 0, "matmul: negative size M={} N={} K={}", M, N, K);
    if (M == 0 || N == 0) return;
    TS_CHECK(out != nullptr && (K == 0 || (a != nullptr && b != nullptr)), "matmul: null operand for M={} N={} K={}",
             M, N, K);
    half_matmul<T, Out>(out, a, b, bias, M, N, K, ta, tb, accumulate);
  } else {
    static_assert(std::is_same_v<T, Out>, "a float or double product is stored in its own type");
    float_matmul<T>(float_gemm(), out, a, b, bias, M, N, K, ta, tb, accumulate);
  }
}

std::string half_gemm_description() { return half_gemm_engine().describe(); }

std::string_view float_gemm_library_name(FloatGemmLibrary library) {
  return library == FloatGemmLibrary::OpenBlas ? "openblas-sgemm" : "onednn-sgemm";
}

std::string float_gemm_name(FloatGemm gemm) {
  const std::string_view library = float_gemm_library_name(gemm.provider);
  return gemm.block == kNarrowGemmBlock ? std::string(library) : fmt::format("{}/{}", library, gemm.block);
}

void use_float_gemm(FloatGemm gemm) {
  TS_CHECK(gemm.block >= 16, "a float GEMM block of {} rows is narrower than the micro-kernels' 16", gemm.block);
  chosen_float_library.store(gemm.provider);
  chosen_float_block.store(gemm.block);
}
FloatGemm float_gemm() {
  return {chosen_float_library.load(std::memory_order_relaxed), chosen_float_block.load(std::memory_order_relaxed)};
}
FloatGemmLibrary float_gemm_library() { return chosen_float_library.load(std::memory_order_relaxed); }
std::string float_gemm_name() { return float_gemm_name(float_gemm()); }

void float_matmul_by(FloatGemm gemm, float* out, const float* a, const float* b, int M, int N, int K, Transpose ta,
                     Transpose tb) {
  float_matmul<float>(gemm, out, a, b, nullptr, M, N, K, ta, tb, false);
}

template void gemm<float>(Transpose, Transpose, int, int, int, float, const float*, int, const float*, int, float,
                          float*, int);
template void gemm<double>(Transpose, Transpose, int, int, int, double, const double*, int, const double*, int, double,
                           double*, int);
template void matmul<float, float>(float*, const float*, const float*, const float*, int, int, int, Transpose,
                                   Transpose, bool);
template void matmul<double, double>(double*, const double*, const double*, const double*, int, int, int, Transpose,
                                     Transpose, bool);
template void matmul<bf16, bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int, Transpose, Transpose,
                                 bool);
template void matmul<bf16, float>(float*, const bf16*, const bf16*, const bf16*, int, int, int, Transpose, Transpose,
                                  bool);
template void matmul<f16, f16>(f16*, const f16*, const f16*, const f16*, int, int, int, Transpose, Transpose, bool);
template void matmul<f16, float>(float*, const f16*, const f16*, const f16*, int, int, int, Transpose, Transpose,
                                 bool);

}  // namespace tessera::kernels
