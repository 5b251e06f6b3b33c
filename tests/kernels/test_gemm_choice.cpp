// Choosing the float GEMM's library (kernels/cpu/gemm_choice.h): the products a linear layer makes,
// both libraries computing the same product, the timing of every listed product, and the margin
// that keeps a near tie on oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/matmul.h"

namespace tessera::kernels {
namespace {

// Restores the process's library when a test that sets it ends.
struct KeepFloatGemm {
  FloatGemmLibrary before = float_gemm_library();
  ~KeepFloatGemm() { use_float_gemm_library(before); }
};

TEST(GemmChoice, ALinearLayerMakesItsForwardInputAndWeightGradientProducts) {
  std::vector<GemmProblem> problems;
  add_linear_layer(problems, 768, 256, 512);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].M, 512);  // y = x·Wᵀ
  EXPECT_EQ(problems[0].N, 768);
  EXPECT_EQ(problems[0].K, 256);
  EXPECT_EQ(problems[0].tb, Transpose::Yes);
  EXPECT_EQ(problems[1].M, 512);  // dx = dy·W
  EXPECT_EQ(problems[1].N, 256);
  EXPECT_EQ(problems[1].K, 768);
  EXPECT_EQ(problems[2].M, 768);  // dW = dyᵀ·x
  EXPECT_EQ(problems[2].N, 256);
  EXPECT_EQ(problems[2].K, 512);
  EXPECT_EQ(problems[2].ta, Transpose::Yes);
  add_linear_layer(problems, 768, 256, 512);  // a second layer of the shape counts, not a new row
  add_linear_layer(problems, 256, 256, 512);
  ASSERT_EQ(problems.size(), 6u);
  EXPECT_EQ(problems[0].count, 2);
  EXPECT_EQ(problems[3].count, 1);
  EXPECT_THROW(add_linear_layer(problems, 0, 256, 512), Error);
}

TEST(GemmChoice, BothLibrariesMakeTheSameProduct) {
  const int M = 67, N = 300, K = 129;  // edges that are not multiples of any kernel's width
  std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 2 * uniform(7, 1, i) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 2 * uniform(7, 2, i) - 1;
  for (Transpose ta : {Transpose::No, Transpose::Yes}) {
    for (Transpose tb : {Transpose::No, Transpose::Yes}) {
      std::vector<float> onednn(static_cast<size_t>(M) * N), openblas(onednn.size());
      float_matmul_by(FloatGemmLibrary::OneDnn, onednn.data(), a.data(), b.data(), M, N, K, ta, tb);
      float_matmul_by(FloatGemmLibrary::OpenBlas, openblas.data(), a.data(), b.data(), M, N, K, ta, tb);
      // The same operands read as op(a), op(b): a's buffer is [M,K] or [K,M], b's [K,N] or [N,K].
      for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
          double exact = 0;
          for (int k = 0; k < K; ++k) {
            const float x = ta == Transpose::No ? a[static_cast<size_t>(i) * K + k] : a[static_cast<size_t>(k) * M + i];
            const float y = tb == Transpose::No ? b[static_cast<size_t>(k) * N + j] : b[static_cast<size_t>(j) * K + k];
            exact += static_cast<double>(x) * y;
          }
          const size_t at = static_cast<size_t>(i) * N + j;
          ASSERT_NEAR(onednn[at], exact, 1e-4 * std::sqrt(K) * 4) << i << "," << j;
          ASSERT_NEAR(openblas[at], exact, 1e-4 * std::sqrt(K) * 4) << i << "," << j;
        }
      }
    }
  }
}

TEST(GemmChoice, TheChosenLibraryRunsMatmulAndNamesItself) {
  KeepFloatGemm keep;
  const int M = 40, N = 48, K = 32;
  std::vector<float> a(static_cast<size_t>(M) * K, 0.5f), b(static_cast<size_t>(K) * N, 0.25f);
  for (FloatGemmLibrary library : {FloatGemmLibrary::OpenBlas, FloatGemmLibrary::OneDnn}) {
    use_float_gemm_library(library);
    EXPECT_EQ(float_gemm_library(), library);
    EXPECT_EQ(float_gemm_name(), float_gemm_library_name(library));
    std::vector<float> out(static_cast<size_t>(M) * N), by(out.size());
    matmul(out.data(), a.data(), b.data(), static_cast<const float*>(nullptr), M, N, K, Transpose::No, Transpose::No,
           false);
    float_matmul_by(library, by.data(), a.data(), b.data(), M, N, K, Transpose::No, Transpose::No);
    EXPECT_EQ(out, by);
  }
  EXPECT_EQ(float_gemm_library_name(FloatGemmLibrary::OpenBlas), "openblas-sgemm");
  EXPECT_EQ(float_gemm_library_name(FloatGemmLibrary::OneDnn), "onednn-sgemm");
}

TEST(GemmChoice, TimesEveryProductAndScalesTheCappedOnesByTheirFlops) {
  std::vector<GemmProblem> small, large;
  add_linear_layer(small, 64, 32, 16);
  const FloatGemmTimes times = time_float_gemm_libraries(small, 1);
  EXPECT_EQ(times.shapes, 3);
  EXPECT_GT(times.onednn_seconds, 0);
  EXPECT_GT(times.openblas_seconds, 0);
  // One dimension 16 times the limit: measured at the limit, counted 16 times over (within what
  // timing a product 16 times smaller can say: far more than the uncapped size's share of the cap).
  large.push_back({16, 16 * kMeasuredSizeLimit, 16, Transpose::No, Transpose::No, 1});
  const FloatGemmTimes scaled = time_float_gemm_libraries(large, 1);
  EXPECT_EQ(scaled.shapes, 1);
  std::vector<GemmProblem> at_limit{{16, kMeasuredSizeLimit, 16, Transpose::No, Transpose::No, 1}};
  const FloatGemmTimes capped = time_float_gemm_libraries(at_limit, 3);
  EXPECT_GT(scaled.onednn_seconds, 4 * capped.onednn_seconds);
  EXPECT_GT(scaled.openblas_seconds, 4 * capped.openblas_seconds);
  EXPECT_THROW(time_float_gemm_libraries(small, 0), Error);
}

TEST(GemmChoice, OpenBlasOnlyWhenFasterByTheMargin) {
  EXPECT_EQ(faster_float_gemm({.onednn_seconds = 1.0, .openblas_seconds = 0.5}), FloatGemmLibrary::OpenBlas);
  EXPECT_EQ(faster_float_gemm({.onednn_seconds = 1.0, .openblas_seconds = 1 - kFloatGemmMargin}),
            FloatGemmLibrary::OpenBlas);
  EXPECT_EQ(faster_float_gemm({.onednn_seconds = 1.0, .openblas_seconds = 0.99}), FloatGemmLibrary::OneDnn);
  EXPECT_EQ(faster_float_gemm({.onednn_seconds = 1.0, .openblas_seconds = 2.0}), FloatGemmLibrary::OneDnn);
  EXPECT_EQ(faster_float_gemm({.onednn_seconds = 1.0, .openblas_seconds = 0}), FloatGemmLibrary::OneDnn);
}

}  // namespace
}  // namespace tessera::kernels
