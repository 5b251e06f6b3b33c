// Top-k selection by magnitude against the comparison it replaces: std::nth_element under the
// order |x| descending, index ascending, then the chosen indices sorted. The two must pick the same
// set for every input without NaN, or ranks and reruns of top-k compression would send different
// gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/top_k_select.h"

namespace tessera::kernels {
namespace {

std::vector<int32_t> by_comparison(const std::vector<float>& x, int64_t k) {
  std::vector<int32_t> index(x.size());
  std::iota(index.begin(), index.end(), 0);
  const auto larger = [&](int32_t a, int32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(index.begin(), index.begin() + (k - 1), index.end(), larger);
  index.resize(static_cast<size_t>(k));
  std::sort(index.begin(), index.end());
  return index;
}

// Inputs of every kind the selection meets: gradients spread over orders of magnitude, many exact
// ties (quantized values, zeros of both signs), denormals, infinities, values that share a key's
// high half and differ in its low half.
std::vector<float> values_of_kind(int kind, size_t n, std::mt19937& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-3, 3), exponent(-40, 10);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[i] = normal(rng) * std::ldexp(1.0f, exponent(rng)); break;
      case 1: x[i] = static_cast<float>(small(rng)) * 0.25f; break;  // few distinct magnitudes
      case 2: x[i] = (i % 2 ? -0.0f : 0.0f); break;                   // all ties at zero
      case 3: x[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(small(rng)); break;
      case 4: x[i] = i % 97 == 0 ? (i % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity() : normal(rng); break;
      default: x[i] = 1.0f + static_cast<float>(i % 300) * std::numeric_limits<float>::epsilon(); break;
    }
  }
  return x;
}

TEST(TopKSelect, PicksTheSetTheComparisonOrderPicks) {
  std::mt19937 rng(7);
  for (int kind = 0; kind < 6; ++kind) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{17}, size_t{1000}, size_t{65537}}) {
      const std::vector<float> x = values_of_kind(kind, n, rng);
      for (int64_t k : {int64_t{1}, static_cast<int64_t>(n / 100), static_cast<int64_t>(n / 3),
                        static_cast<int64_t>(n) - 1, static_cast<int64_t>(n)}) {
        if (k < 1) continue;
        SCOPED_TRACE(testing::Message() << "kind " << kind << ", n " << n << ", k " << k);
        EXPECT_EQ(top_k_magnitude_indices(x, k), by_comparison(x, k));
      }
    }
  }
}

TEST(TopKSelect, ANanIsTakenFirst) {
  std::vector<float> x = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f, -2.0f};
  EXPECT_EQ(top_k_magnitude_indices(x, 1), (std::vector<int32_t>{1}));
  EXPECT_EQ(top_k_magnitude_indices(x, 2), (std::vector<int32_t>{1, 2}));
}

TEST(TopKSelect, RefusesACountOutsideTheValues) {
  const std::vector<float> x = {1.0f, 2.0f};
  EXPECT_ANY_THROW(top_k_magnitude_indices(x, 0));
  EXPECT_ANY_THROW(top_k_magnitude_indices(x, 3));
}

// The compressor's local work: the gradient joins the error feedback, the k largest leave it (their
// values sent, zeros left), and the reduced gradient is the sum of every rank's entries.
TEST(TopKSelect, TakingWithFeedbackLeavesTheRestAndScatterSumsTheEntries) {
  std::vector<float> residual = {0.5f, -1.0f, 0.0f, 2.0f, 0.25f};
  const std::vector<float> grad = {0.5f, -3.0f, 0.1f, -1.0f, 0.0f};
  const SparseEntries sent = take_top_k_with_feedback(residual, grad, 2);
  // residual + grad = (1, -4, 0.1, 1, 0.25): -4 first, then the tie of 1 and 1 to the lower index.
  EXPECT_EQ(sent.index, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(sent.values, (std::vector<float>{1.0f, -4.0f}));
  EXPECT_EQ(residual, (std::vector<float>{0.0f, 0.0f, 0.1f, 1.0f, 0.25f}));
  EXPECT_ANY_THROW(take_top_k_with_feedback(residual, std::vector<float>(4), 1));

  std::vector<float> reduced = {9, 9, 9, 9, 9};
  const std::vector<int32_t> index = {0, 1, 1, 3};  // two ranks' entries: both sent index 1
  const std::vector<float> values = {1.0f, -4.0f, 2.0f, 0.5f};
  scatter_entries(reduced, index, values);
  EXPECT_EQ(reduced, (std::vector<float>{1.0f, -2.0f, 0.0f, 0.5f, 0.0f}));
  EXPECT_ANY_THROW(scatter_entries(reduced, index, std::vector<float>(3)));
}

}  // namespace
}  // namespace tessera::kernels
