// PowerSGD's products (kernels/cpu/low_rank.h) against sums in double, at the ranks with a
// compile-time width (1, 2, 4, 8) and at others (3, 5, 16), on matrices with odd sizes; Q read as a
// prefix of a wider matrix, as the power iteration's warm start keeps it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/low_rank.h"

namespace tessera::kernels {
namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// |got - want| within a float sum's rounding of `terms` products of unit-size values.
void expect_near_sum(float got, double want, int64_t terms, const char* what) {
  EXPECT_NEAR(got, want, 1e-6 * static_cast<double>(terms) + 1e-6 * std::fabs(want)) << what;
}

TEST(LowRank, ProductsAndReconstructionMatchDoubleSums) {
  std::mt19937 rng(3);
  for (int64_t rank : {1, 2, 3, 4, 5, 8, 16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {64, 17}, {130, 96}}) {
      SCOPED_TRACE(testing::Message() << "rank " << rank << ", " << rows << " x " << cols);
      const std::vector<float> m = random_values(static_cast<size_t>(rows * cols), rng);
      const int64_t stride = rank + 3;  // Q as the first `rank` columns of a wider matrix
      const std::vector<float> wide_q = random_values(static_cast<size_t>(cols * stride), rng);
      std::vector<float> p(static_cast<size_t>(rows * rank), -1.0f);
      low_rank_project(m.data(), rows, cols, wide_q.data(), stride, rank, p.data());
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t k = 0; k < rank; ++k) {
          double want = 0;
          for (int64_t j = 0; j < cols; ++j) want += double(m[i * cols + j]) * wide_q[j * stride + k];
          expect_near_sum(p[i * rank + k], want, cols, "P = M Q");
        }
      }
      std::vector<float> q(static_cast<size_t>(cols * rank), -1.0f);
      low_rank_project_transposed(m.data(), rows, cols, p.data(), rank, q.data());
      for (int64_t j = 0; j < cols; ++j) {
        for (int64_t k = 0; k < rank; ++k) {
          double want = 0;
          for (int64_t i = 0; i < rows; ++i) want += double(m[i * cols + j]) * p[i * rank + k];
          expect_near_sum(q[j * rank + k], want, rows * cols, "Q = Mt P");
        }
      }
      std::vector<float> approx = m, error(m.size(), -1.0f);
      low_rank_reconstruct(approx.data(), error.data(), rows, cols, p.data(), q.data(), rank, 4.0f);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          double want = 0, magnitude = 0;  // the sum, and the sum of its terms' sizes: its rounding's scale
          for (int64_t k = 0; k < rank; ++k) {
            want += double(p[i * rank + k]) * q[j * rank + k];
            magnitude += std::fabs(double(p[i * rank + k]) * q[j * rank + k]);
          }
          const size_t at = static_cast<size_t>(i * cols + j);
          const double scale = 1 + magnitude;
          EXPECT_NEAR(approx[at], want, 1e-5 * scale * rank) << "P Qt";
          EXPECT_NEAR(error[at], m[at] - want / 4.0, 1e-5 * scale * rank) << "M - P Qt / R";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
