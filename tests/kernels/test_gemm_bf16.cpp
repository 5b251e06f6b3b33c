// The bf16 GEMM on both paths against a float64 product of the same bf16 values: every transpose,
// leading dimensions longer than the rows, overwrite and accumulate, shapes from one element to a
// few hundred. Products of bf16 values are exact in f32 and the sums run in f32, so the error is
// the f32 summation's alone. The oneDNN path runs where the CPU has bf16 dot products, and must
// then run oneDNN's bf16 kernels, not a reference implementation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "harness.h"
#include "core/check.h"
#include "kernels/cpu/gemm_bf16.h"

namespace tessera::kernels::testing {
namespace {

struct GemmShape {
  int M, N, K;
};

std::vector<Bf16GemmPath> paths_here() {
  std::vector<Bf16GemmPath> paths{Bf16GemmPath::WidenToF32};
  if (detect_bf16_gemm_path() == Bf16GemmPath::OneDnn) paths.push_back(Bf16GemmPath::OneDnn);
  return paths;
}

class Bf16GemmTest : public ::testing::TestWithParam<GemmShape> {};

TEST_P(Bf16GemmTest, MatchesTheFloat64ProductOfTheSameValues) {
  const auto [M, N, K] = GetParam();
  for (Bf16GemmPath path : paths_here()) {
    Bf16Gemm gemm_engine(path);
    for (Transpose ta : {Transpose::No, Transpose::Yes}) {
      for (Transpose tb : {Transpose::No, Transpose::Yes}) {
        for (bool accumulate : {false, true}) {
          const std::string what = fmt::format("{} M{} N{} K{} ta{} tb{} accumulate {}", bf16_gemm_path_name(path), M, N,
                                               K, ta == Transpose::Yes, tb == Transpose::Yes, accumulate);
          // Stored shapes, each row padded by 3 so the leading dimensions are not the widths.
          const int a_rows = ta == Transpose::Yes ? K : M, a_cols = ta == Transpose::Yes ? M : K;
          const int b_rows = tb == Transpose::Yes ? N : K, b_cols = tb == Transpose::Yes ? K : N;
          const int lda = a_cols + 3, ldb = b_cols + 3, ldc = N + 3;
          const std::vector<double> a_values = random_normal(size_t(a_rows) * lda, 7, what + ":a");
          const std::vector<double> b_values = random_normal(size_t(b_rows) * ldb, 7, what + ":b");
          const std::vector<double> c_values = random_normal(size_t(M) * ldc, 7, what + ":c");
          std::vector<bf16> a(a_values.size()), b(b_values.size());
          for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(static_cast<float>(a_values[i]));
          for (size_t i = 0; i < b.size(); ++i) b[i] = to_bf16(static_cast<float>(b_values[i]));
          std::vector<float> c(c_values.begin(), c_values.end());
          gemm_engine.multiply(ta, tb, M, N, K, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);

          std::vector<double> got, want;
          for (int i = 0; i < M; ++i) {
            for (int j = 0; j < N; ++j) {
              double sum = accumulate ? static_cast<double>(static_cast<float>(c_values[size_t(i) * ldc + j])) : 0.0;
              for (int k = 0; k < K; ++k) {
                const bf16 x = ta == Transpose::Yes ? a[size_t(k) * lda + i] : a[size_t(i) * lda + k];
                const bf16 y = tb == Transpose::Yes ? b[size_t(j) * ldb + k] : b[size_t(k) * ldb + j];
                sum += static_cast<double>(to_float(x)) * static_cast<double>(to_float(y));
              }
              got.push_back(c[size_t(i) * ldc + j]);
              want.push_back(sum);
            }
            // The padding of c's rows is untouched.
            for (int j = N; j < ldc; ++j) {
              ASSERT_EQ(c[size_t(i) * ldc + j], static_cast<float>(c_values[size_t(i) * ldc + j])) << what;
            }
          }
          EXPECT_LT(relative_error(got, want), 2e-6) << what;
        }
      }
    }
    if (path == Bf16GemmPath::OneDnn) {
      EXPECT_NE(gemm_engine.describe().find("bf16"), std::string::npos)
          << "oneDNN on a CPU with bf16 dot products runs " << gemm_engine.describe();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Bf16GemmTest,
                         ::testing::Values(GemmShape{1, 1, 1}, GemmShape{3, 5, 7}, GemmShape{17, 33, 65},
                                           GemmShape{64, 96, 128}, GemmShape{130, 70, 300}),
                         [](const ::testing::TestParamInfo<GemmShape>& s) {
                           return fmt::format("M{}_N{}_K{}", s.param.M, s.param.N, s.param.K);
                         });

TEST(Bf16Gemm, ThePathFollowsTheCpu) {
  EXPECT_EQ(detect_bf16_gemm_path() == Bf16GemmPath::OneDnn, cpu_has_bf16_dot_products());
  EXPECT_EQ(Bf16Gemm(Bf16GemmPath::WidenToF32).describe(), "widen-to-f32");
}

TEST(Bf16Gemm, LeadingDimensionsShorterThanTheRowsAreRefused) {
  Bf16Gemm gemm_engine(Bf16GemmPath::WidenToF32);
  std::vector<bf16> a(64), b(64);
  std::vector<float> c(64);
  EXPECT_THROW(gemm_engine.multiply(Transpose::No, Transpose::No, 4, 4, 4, a.data(), 3, b.data(), 4, c.data(), 4, false),
               tessera::Error);
}

}  // namespace
}  // namespace tessera::kernels::testing
