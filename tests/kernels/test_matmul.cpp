// GEMM wrapper: every transpose case, bias, accumulation, degenerate sizes, and concurrent calls
// from inside an OpenMP region (how attention uses it), against plain loops.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>

#include "harness.h"
#include "kernels/cpu/matmul.h"

namespace tessera::kernels::testing {
namespace {

// out[M,N] = (acc ? out : 0) + op(a) op(b) + bias, in double, by the definition.
std::vector<double> reference(const std::vector<double>& out0, const std::vector<double>& a,
                              const std::vector<double>& b, const std::vector<double>* bias, int M, int N, int K,
                              bool ta, bool tb, bool acc) {
  std::vector<double> out(size_t(M) * N);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = acc ? out0[size_t(i) * N + j] : 0.0;
      if (bias != nullptr) s += (*bias)[j];
      for (int k = 0; k < K; ++k) {
        const double x = ta ? a[size_t(k) * M + i] : a[size_t(i) * K + k];
        const double y = tb ? b[size_t(j) * K + k] : b[size_t(k) * N + j];
        s += x * y;
      }
      out[size_t(i) * N + j] = s;
    }
  }
  return out;
}

struct MatmulCase {
  int M, N, K;
  bool ta, tb, bias, accumulate;
};

class Matmul : public ::testing::TestWithParam<MatmulCase> {};

template <class T>
void check(const MatmulCase& c, double tolerance) {
  const std::string tag = fmt::format("mm:{},{},{}", c.M, c.N, c.K);
  const auto a = random_normal(size_t(c.M) * c.K, 3, tag + ":a");
  const auto b = random_normal(size_t(c.K) * c.N, 3, tag + ":b");
  const auto bias = random_normal(size_t(c.N), 3, tag + ":bias");
  const auto out0 = random_normal(size_t(c.M) * c.N, 3, tag + ":out");
  std::vector<T> out = cast<T>(out0);
  if (!c.accumulate) std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());  // must be ignored
  const std::vector<T> at = cast<T>(a), bt = cast<T>(b), biast = cast<T>(bias);
  matmul<T>(out.data(), at.data(), bt.data(), c.bias ? biast.data() : nullptr, c.M, c.N, c.K,
            c.ta ? Transpose::Yes : Transpose::No, c.tb ? Transpose::Yes : Transpose::No, c.accumulate);
  const auto expected = reference(out0, a, b, c.bias ? &bias : nullptr, c.M, c.N, c.K, c.ta, c.tb, c.accumulate);
  EXPECT_LT(relative_error(cast<double>(out), expected), tolerance);
}

TEST_P(Matmul, MatchesLoops) {
  check<double>(GetParam(), 1e-14);
  check<float>(GetParam(), 1e-6);
}

std::vector<MatmulCase> cases() {
  std::vector<MatmulCase> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bias : {false, true})
        for (bool acc : {false, true}) {
          v.push_back({7, 13, 5, ta, tb, bias, acc});
          v.push_back({1, 1, 1, ta, tb, bias, acc});
        }
  v.push_back({130, 67, 129, false, true, true, false});  // large enough for the threaded bias path
  // One row (decoding): the matrix-vector path, serial and split over threads (N·K >= 2^21).
  for (bool tb : {false, true})
    for (bool acc : {false, true}) {
      v.push_back({1, 301, 257, false, tb, true, acc});
      v.push_back({1, 2051, 1031, false, tb, !acc, acc});
    }
  v.push_back({5, 3, 0, false, false, true, false});      // K = 0: out = bias
  v.push_back({5, 3, 0, true, false, false, true});       // K = 0, accumulate: out unchanged
  return v;
}

INSTANTIATE_TEST_SUITE_P(Kernels, Matmul, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MatmulCase>& i) {
                           const MatmulCase& c = i.param;
                           return fmt::format("M{}_N{}_K{}{}{}{}{}", c.M, c.N, c.K, c.ta ? "_aT" : "",
                                              c.tb ? "_bT" : "", c.bias ? "_bias" : "", c.accumulate ? "_acc" : "");
                         });

// The one-row path gives the same bits whatever the number of threads: each output is summed by
// one thread in a fixed order.
TEST(KernelMatmul, OneRowIsBitwiseTheSameOnAnyNumberOfThreads) {
  constexpr int N = 2051, K = 1031;  // above the size that splits the work
  const std::vector<float> a = cast<float>(random_normal(K, 5, "mv:a"));
  const std::vector<float> b = cast<float>(random_normal(size_t(N) * K, 5, "mv:b"));
  for (Transpose tb : {Transpose::No, Transpose::Yes}) {
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 3}) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      std::vector<float> out(N);
      matmul<float>(out.data(), a.data(), b.data(), nullptr, 1, N, K, Transpose::No, tb, false);
      omp_set_num_threads(before);
      outs.push_back(out);
    }
    EXPECT_EQ(outs[0], outs[1]);
    EXPECT_EQ(outs[0], outs[2]);
  }
}

// Attention calls gemm on strided tiles from every thread of a parallel region at once.
TEST(KernelGemm, StridedTilesFromManyThreadsAtOnce) {
  constexpr int kItems = 16, M = 33, N = 17, K = 20, kLd = 50;
  const auto a = random_normal(size_t(kItems) * M * kLd, 4, "gemm:a");
  const auto b = random_normal(size_t(kItems) * N * kLd, 4, "gemm:b");
  std::vector<double> c(size_t(kItems) * M * N);
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
  for (int item = 0; item < kItems; ++item) {
    gemm<double>(Transpose::No, Transpose::Yes, M, N, K, 0.5, a.data() + size_t(item) * M * kLd, kLd,
                 b.data() + size_t(item) * N * kLd, kLd, 0.0, c.data() + size_t(item) * M * N, N);
  }
  for (int item = 0; item < kItems; ++item) {
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += a[(size_t(item) * M + i) * kLd + k] * b[(size_t(item) * N + j) * kLd + k];
        ASSERT_NEAR(c[(size_t(item) * M + i) * N + j], 0.5 * s, 1e-12) << item << " " << i << " " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::testing
