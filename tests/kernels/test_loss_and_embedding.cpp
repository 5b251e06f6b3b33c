// Cross-entropy bookkeeping (ignore_index, counts, means, the in-place gradient) and the errors
// that bad token ids and targets must raise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "harness.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"

namespace tessera::kernels::testing {
namespace {

constexpr int kIgnore = -100;

std::string error_of(const auto& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KernelCrossEntropy, IgnoredRowsAreLeftOutOfTheMeanAndTheGradient) {
  constexpr int N = 6, V = 11;
  const std::vector<float> logits = cast<float>(random_normal(N * V, 1, "ce:ignore", 0.0, 3.0));
  const std::vector<int32_t> targets{3, kIgnore, 0, 10, kIgnore, 7};
  std::vector<float> losses(N, -1.0f);
  int64_t count = -1;
  const double mean = cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, kIgnore, &count);
  EXPECT_EQ(count, 4);
  double expected_sum = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[n] == kIgnore) {
      EXPECT_EQ(losses[n], 0.0f);
      continue;
    }
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(double(logits[n * V + v]));
    const double loss = std::log(z) - logits[n * V + targets[n]];
    EXPECT_NEAR(losses[n], loss, 1e-5 * loss);
    expected_sum += loss;
  }
  EXPECT_NEAR(mean, expected_sum / 4, 1e-5 * mean);

  // The training kernel: same losses, the sum returned, dlogits written over the logits.
  std::vector<float> dlogits = logits, losses2(N);
  const float scale = 0.25f;
  const double sum =
      cross_entropy_forward_backward(dlogits.data(), losses2.data(), targets.data(), N, V, kIgnore, scale);
  EXPECT_NEAR(sum, expected_sum, 1e-5 * expected_sum);
  EXPECT_EQ(losses2, losses);
  for (int n = 0; n < N; ++n) {
    double row_sum = 0;
    for (int v = 0; v < V; ++v) row_sum += dlogits[n * V + v];
    if (targets[n] == kIgnore) {
      for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[n * V + v], 0.0f);
    } else {
      // softmax - onehot sums to zero; the target's entry is the only negative one.
      EXPECT_NEAR(row_sum, 0.0, 1e-6);
      EXPECT_LT(dlogits[n * V + targets[n]], 0.0f);
      EXPECT_GT(dlogits[n * V + (targets[n] + 1) % V], 0.0f);
    }
  }
}

TEST(KernelCrossEntropy, AllRowsIgnoredGivesZeroMeanAndCount) {
  const std::vector<float> logits(3 * 4, 1.0f);
  const std::vector<int32_t> targets(3, kIgnore);
  std::vector<float> losses(3);
  int64_t count = -1;
  EXPECT_EQ(cross_entropy_forward(losses.data(), logits.data(), targets.data(), 3, 4, kIgnore, &count), 0.0);
  EXPECT_EQ(count, 0);
}

TEST(KernelCrossEntropy, HugeLogitsStayFinite) {
  std::vector<float> logits{1000.0f, -1000.0f, 999.0f, 0.0f};
  const std::vector<int32_t> targets{2};
  std::vector<float> losses(1);
  const double sum = cross_entropy_forward_backward(logits.data(), losses.data(), targets.data(), 1, 4, kIgnore, 1.0f);
  EXPECT_NEAR(sum, std::log(1.0 + std::exp(-1.0)) + 1.0, 1e-5);
  for (float g : logits) EXPECT_TRUE(std::isfinite(g));
}

TEST(KernelCrossEntropy, TargetOutsideTheVocabularyThrowsAndNamesIt) {
  const std::vector<float> logits(3 * 5, 0.0f);
  std::vector<float> losses(3), inout = logits;
  const std::vector<int32_t> targets{1, 5, 2};
  const std::string msg =
      error_of([&] { cross_entropy_forward(losses.data(), logits.data(), targets.data(), 3, 5, kIgnore, nullptr); });
  EXPECT_NE(msg.find("target 5 at row 1 is outside the vocabulary [0, 5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ignore_index (-100)"), std::string::npos) << msg;
  const std::vector<int32_t> negative{-1, 0, 0};
  const std::string msg2 = error_of(
      [&] { cross_entropy_forward_backward(inout.data(), losses.data(), negative.data(), 3, 5, kIgnore, 1.0f); });
  EXPECT_NE(msg2.find("target -1 at row 0"), std::string::npos) << msg2;
  EXPECT_EQ(inout, logits) << "nothing is written before the check";
}

// The vocabulary-parallel loss: on the whole vocabulary it is the fused cross-entropy bit for bit;
// split into column blocks whose row statistics are combined (here by hand, as the ranks would),
// every block's losses and gradient match the whole one's, and padding columns get no gradient.
TEST(KernelCrossEntropy, VocabularyBlocksGiveTheWholeVocabularysLossAndGradient) {
  constexpr int N = 6, V = 11, kBlocks = 2, kBlock = 6;  // 12 columns: the last is padding
  const std::vector<float> logits = cast<float>(random_normal(N * V, 1, "ce:vocab", 0.0, 3.0));
  const std::vector<int32_t> targets{3, kIgnore, 0, 10, 5, 6};
  std::vector<float> whole = logits, losses(N);
  const double sum = cross_entropy_forward_backward(whole.data(), losses.data(), targets.data(), N, V, kIgnore, 0.5f);
  std::vector<float> same = logits, same_losses(N);
  const double same_sum = vocab_parallel_cross_entropy(same.data(), same_losses.data(), targets.data(), N, V, V, 0, V,
                                                       kIgnore, 0.5f, {}, {});
  EXPECT_EQ(same_sum, sum);
  EXPECT_EQ(same, whole);
  EXPECT_EQ(same_losses, losses);

  // Each block's per-row values, combined as an all-reduce would, after both blocks produced theirs.
  std::vector<std::vector<float>> blocks(kBlocks, std::vector<float>(N * kBlock, 123.0f)), block_losses(kBlocks,
                                                                                                      std::vector<float>(N));
  for (int b = 0; b < kBlocks; ++b) {
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < kBlock && b * kBlock + v < V; ++v) blocks[b][n * kBlock + v] = logits[n * V + b * kBlock + v];
    }
  }
  // What the reductions over the ranks would give: the whole vocabulary's values, from the logits.
  std::vector<float> row_max(N), target_logit(N), sum_exp(N);
  for (int n = 0; n < N; ++n) {
    row_max[n] = *std::max_element(logits.begin() + n * V, logits.begin() + (n + 1) * V);
    target_logit[n] = targets[n] == kIgnore ? 0.0f : logits[n * V + targets[n]];
  }
  for (int b = 0; b < kBlocks; ++b) {
    const int first = b * kBlock, real = std::min(kBlock, V - first);
    int sums_seen = 0;
    const RowReduce<float> max_over = [&](float* values, int n) { std::copy(row_max.begin(), row_max.begin() + n, values); };
    const RowReduce<float> sum_over = [&](float* values, int n) {
      // First the target's logit (this block's part replaced by the whole), then the sum of exponentials.
      if (sums_seen++ == 0) {
        std::copy(target_logit.begin(), target_logit.begin() + n, values);
        return;
      }
      for (int r = 0; r < n; ++r) {
        double s = 0;
        for (int v = 0; v < V; ++v) s += std::exp(double(logits[r * V + v]) - row_max[r]);
        values[r] = static_cast<float>(s);
      }
    };
    vocab_parallel_cross_entropy(blocks[b].data(), block_losses[b].data(), targets.data(), N, kBlock, real, first, V,
                                 kIgnore, 0.5f, max_over, sum_over);
    for (int n = 0; n < N; ++n) {
      EXPECT_NEAR(block_losses[b][n], losses[n], 1e-5f) << "block " << b << " row " << n;
      for (int v = 0; v < kBlock; ++v) {
        const float want = first + v < V ? whole[n * V + first + v] : 0.0f;
        EXPECT_NEAR(blocks[b][n * kBlock + v], want, 1e-6f) << "block " << b << " row " << n << " column " << v;
      }
    }
  }
}

// A table of rows [first, first + V): the ids it holds find their rows, the others zeros; the
// gradient goes to the held rows only. Two halves summed are the whole lookup.
TEST(KernelEmbedding, RowBlocksSumToTheWholeLookup) {
  constexpr int B = 2, T = 3, C = 4, V = 6;
  const std::vector<float> table = cast<float>(random_normal(V * C, 1, "emb:rows", 0.0, 1.0));
  const std::vector<int32_t> tokens{0, 5, 2, 3, 3, 1};
  std::vector<float> whole(B * T * C);
  embedding_forward(whole.data(), tokens.data(), table.data(), static_cast<const float*>(nullptr), B, T, C, V);
  std::vector<float> sum(B * T * C, 0.0f);
  std::vector<float> dtable(V * C, 0.0f);
  const std::vector<float> dy(B * T * C, 1.0f);
  for (int first : {0, 3}) {
    std::vector<float> part(B * T * C, -1.0f);
    embedding_rows_forward(part.data(), tokens.data(), table.data() + first * C, B, T, C, first, 3);
    for (size_t i = 0; i < part.size(); ++i) sum[i] += part[i];
    embedding_rows_backward(dtable.data() + first * C, dy.data(), tokens.data(), B, T, C, first, 3);
  }
  EXPECT_EQ(sum, whole);
  // Token 3 appears twice: its row gathers two ones per channel; token 4 none.
  EXPECT_EQ(dtable[3 * C], 2.0f);
  EXPECT_EQ(dtable[4 * C], 0.0f);
  EXPECT_EQ(dtable[5 * C], 1.0f);
}

TEST(KernelEmbedding, TokenOutsideTheVocabularyThrowsWithItsPosition) {
  constexpr int B = 2, T = 3, C = 4, V = 7;
  const std::vector<float> wte(V * C, 1.0f);
  std::vector<float> out(B * T * C);
  const std::vector<int32_t> tokens{0, 1, 2, 3, 4, 9};
  const std::string msg = error_of([&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), static_cast<const float*>(nullptr), B, T, C, V);
  });
  EXPECT_NE(msg.find("token id 9 at position (b=1, t=2) is outside the vocabulary [0, 7)"), std::string::npos) << msg;
  const std::vector<int32_t> negative{0, -3, 2, 3, 4, 5};
  const std::string msg2 = error_of([&] {
    embedding_forward(out.data(), negative.data(), wte.data(), static_cast<const float*>(nullptr), B, T, C, V);
  });
  EXPECT_NE(msg2.find("token id -3 at position (b=0, t=1)"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace tessera::kernels::testing
