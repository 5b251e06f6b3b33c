// Choosing the float GEMM (kernels/cpu/gemm_choice.h): the products a linear layer makes, every
// candidate (library and block width) computing the same product, its bits independent of the
// thread count, the timing of every listed product, and the margin that keeps a near tie on the
// earlier candidate.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/matmul.h"

namespace tessera::kernels {
namespace {

// Restores the process's float GEMM when a test that sets it ends.
struct KeepFloatGemm {
  FloatGemm before = float_gemm();
  ~KeepFloatGemm() { use_float_gemm(before); }
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

TEST(GemmChoice, EveryCandidateMakesTheSameProduct) {
  // Edges that are not multiples of any kernel's width; 600 rows are 4 narrow blocks or 2 wide ones.
  const int M = 600, N = 300, K = 129;
  std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 2 * uniform(7, 1, i) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 2 * uniform(7, 2, i) - 1;
  for (Transpose ta : {Transpose::No, Transpose::Yes}) {
    for (Transpose tb : {Transpose::No, Transpose::Yes}) {
      std::vector<double> exact(static_cast<size_t>(M) * N);
      // The same operands read as op(a), op(b): a's buffer is [M,K] or [K,M], b's [K,N] or [N,K].
      for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
          double sum = 0;
          for (int k = 0; k < K; ++k) {
            const float x = ta == Transpose::No ? a[static_cast<size_t>(i) * K + k] : a[static_cast<size_t>(k) * M + i];
            const float y = tb == Transpose::No ? b[static_cast<size_t>(k) * N + j] : b[static_cast<size_t>(j) * K + k];
            sum += static_cast<double>(x) * y;
          }
          exact[static_cast<size_t>(i) * N + j] = sum;
        }
      }
      for (FloatGemm gemm : kFloatGemmCandidates) {
        std::vector<float> out(exact.size());
        float_matmul_by(gemm, out.data(), a.data(), b.data(), M, N, K, ta, tb);
        for (size_t at = 0; at < out.size(); ++at) {
          ASSERT_NEAR(out[at], exact[at], 1e-4 * std::sqrt(K) * 4) << float_gemm_name(gemm) << " at " << at;
        }
      }
    }
  }
}

// Whatever the candidate, the cut into blocks is the shape's and the width's: the bits do not
// follow the thread count.
TEST(GemmChoice, EveryCandidatesBitsAreTheSameOnOneThreadAndOnTwo) {
  KeepFloatGemm keep;
  const int M = 1100, N = 90, K = 70;  // 6 narrow blocks or 2 wide ones
  std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 2 * uniform(9, 1, i) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 2 * uniform(9, 2, i) - 1;
  const int threads = omp_get_max_threads();
  for (FloatGemm gemm : kFloatGemmCandidates) {
    use_float_gemm(gemm);
    std::vector<float> one(static_cast<size_t>(M) * N), two(one.size());
    omp_set_num_threads(1);
    matmul(one.data(), a.data(), b.data(), static_cast<const float*>(nullptr), M, N, K, Transpose::No, Transpose::No,
           false);
    omp_set_num_threads(2);
    matmul(two.data(), a.data(), b.data(), static_cast<const float*>(nullptr), M, N, K, Transpose::No, Transpose::No,
           false);
    EXPECT_EQ(one, two) << float_gemm_name(gemm);
  }
  omp_set_num_threads(threads);
}

TEST(GemmChoice, TheChosenGemmRunsMatmulAndNamesItself) {
  KeepFloatGemm keep;
  const int M = 40, N = 48, K = 32;
  std::vector<float> a(static_cast<size_t>(M) * K, 0.5f), b(static_cast<size_t>(K) * N, 0.25f);
  for (FloatGemm gemm : kFloatGemmCandidates) {
    use_float_gemm(gemm);
    EXPECT_EQ(float_gemm(), gemm);
    EXPECT_EQ(float_gemm_library(), gemm.provider);
    EXPECT_EQ(float_gemm_name(), float_gemm_name(gemm));
    std::vector<float> out(static_cast<size_t>(M) * N), by(out.size());
    matmul(out.data(), a.data(), b.data(), static_cast<const float*>(nullptr), M, N, K, Transpose::No, Transpose::No,
           false);
    float_matmul_by(gemm, by.data(), a.data(), b.data(), M, N, K, Transpose::No, Transpose::No);
    EXPECT_EQ(out, by);
  }
  EXPECT_EQ(float_gemm_library_name(FloatGemmLibrary::OpenBlas), "openblas-sgemm");
  EXPECT_EQ(float_gemm_library_name(FloatGemmLibrary::OneDnn), "onednn-sgemm");
  EXPECT_EQ(float_gemm_name({FloatGemmLibrary::OneDnn, kNarrowGemmBlock}), "onednn-sgemm");
  EXPECT_EQ(float_gemm_name({FloatGemmLibrary::OpenBlas, kWideGemmBlock}), "openblas-sgemm/1024");
  EXPECT_THROW(use_float_gemm({FloatGemmLibrary::OneDnn, 8}), Error);
}

TEST(GemmChoice, TimesEveryProductAndScalesTheCappedOnesByTheirFlops) {
  std::vector<GemmProblem> small, large;
  add_linear_layer(small, 64, 32, 16);
  const FloatGemmTimes times = time_float_gemms(small, 1);
  EXPECT_EQ(times.shapes, 3);
  for (double seconds : times.seconds) EXPECT_GT(seconds, 0);
  // One dimension 16 times the limit: measured at the limit, counted 16 times over (within what
  // timing a product 16 times smaller can say: far more than the uncapped size's share of the cap).
  large.push_back({16, 16 * kMeasuredSizeLimit, 16, Transpose::No, Transpose::No, 1});
  const FloatGemmTimes scaled = time_float_gemms(large, 1);
  EXPECT_EQ(scaled.shapes, 1);
  std::vector<GemmProblem> at_limit{{16, kMeasuredSizeLimit, 16, Transpose::No, Transpose::No, 1}};
  const FloatGemmTimes capped = time_float_gemms(at_limit, 3);
  for (size_t i = 0; i < kFloatGemmCandidates.size(); ++i) {
    EXPECT_GT(scaled.seconds[i], 4 * capped.seconds[i]) << float_gemm_name(kFloatGemmCandidates[i]);
  }
  EXPECT_THROW(time_float_gemms(small, 0), Error);
}

TEST(GemmChoice, ALaterCandidateOnlyWhenFasterByTheMargin) {
  auto times = [](double a, double b, double c, double d) {
    FloatGemmTimes t;
    t.seconds = {a, b, c, d};
    return t;
  };
  const FloatGemm narrow_onednn{FloatGemmLibrary::OneDnn, kNarrowGemmBlock};
  const FloatGemm narrow_openblas{FloatGemmLibrary::OpenBlas, kNarrowGemmBlock};
  const FloatGemm wide_onednn{FloatGemmLibrary::OneDnn, kWideGemmBlock};
  const FloatGemm wide_openblas{FloatGemmLibrary::OpenBlas, kWideGemmBlock};
  EXPECT_EQ(fastest_float_gemm(times(1.0, 0.5, 2.0, 2.0)), narrow_openblas);
  EXPECT_EQ(fastest_float_gemm(times(1.0, 1 - kFloatGemmMargin, 2.0, 2.0)), narrow_openblas);
  EXPECT_EQ(fastest_float_gemm(times(1.0, 0.99, 0.995, 2.0)), narrow_onednn) << "a near tie keeps the first";
  EXPECT_EQ(fastest_float_gemm(times(1.0, 0.9, 0.8, 0.79)), wide_onednn) << "within the margin of the kept one";
  EXPECT_EQ(fastest_float_gemm(times(1.0, 0.9, 0.8, 0.7)), wide_openblas);
  EXPECT_EQ(fastest_float_gemm(times(1.0, 2.0, 0.5, 0)), wide_onednn) << "0: not measured, never taken";
  EXPECT_EQ(fastest_float_gemm(times(1.0, 0, 0, 0)), narrow_onednn);
}

}  // namespace
}  // namespace tessera::kernels
