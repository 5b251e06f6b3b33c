#include "kernels/cpu/gemm_choice.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <limits>

#include "core/check.h"

namespace tessera::kernels {

void add_linear_layer(std::vector<GemmProblem>& problems, int64_t out, int64_t in, int64_t tokens) {
  TS_CHECK(out > 0 && in > 0 && tokens > 0, "a linear layer of {} x {} over {} tokens has no product", out, in,
           tokens);
  const std::array<GemmProblem, 3> layer{{{tokens, out, in, Transpose::No, Transpose::Yes, 1},
                                          {tokens, in, out, Transpose::No, Transpose::No, 1},
                                          {out, in, tokens, Transpose::Yes, Transpose::No, 1}}};
  for (const GemmProblem& p : layer) {
    auto same = std::find_if(problems.begin(), problems.end(), [&](const GemmProblem& q) {
      return q.M == p.M && q.N == p.N && q.K == p.K && q.ta == p.ta && q.tb == p.tb;
    });
    if (same != problems.end()) {
      same->count += 1;
    } else {
      problems.push_back(p);
    }
  }
}

namespace {

double seconds_of(FloatGemm gemm, float* out, const float* a, const float* b, int M, int N, int K, Transpose ta,
                  Transpose tb) {
  const auto start = std::chrono::steady_clock::now();
  float_matmul_by(gemm, out, a, b, M, N, K, ta, tb);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FloatGemmTimes time_float_gemms(const std::vector<GemmProblem>& problems, int rounds) {
  TS_CHECK(rounds >= 1, "timing the float GEMM needs at least one round, not {}", rounds);
  FloatGemmTimes times;
  size_t largest = 0;
  for (const GemmProblem& p : problems) {
    const int64_t m = std::min(p.M, kMeasuredSizeLimit), n = std::min(p.N, kMeasuredSizeLimit),
                  k = std::min(p.K, kMeasuredSizeLimit);
    largest = std::max({largest, static_cast<size_t>(m * k), static_cast<size_t>(k * n), static_cast<size_t>(m * n)});
  }
  // Values that keep the sums finite; their size does not change the speed.
  std::vector<float> a(largest), b(largest), c(largest);
  for (size_t i = 0; i < largest; ++i) {
    a[i] = static_cast<float>(i % 61) * (1.0f / 64);
    b[i] = static_cast<float>(i % 53) * (1.0f / 64);
  }
  for (const GemmProblem& p : problems) {
    if (p.M <= 0 || p.N <= 0 || p.K <= 0 || p.count <= 0) continue;
    const int m = static_cast<int>(std::min(p.M, kMeasuredSizeLimit));
    const int n = static_cast<int>(std::min(p.N, kMeasuredSizeLimit));
    const int k = static_cast<int>(std::min(p.K, kMeasuredSizeLimit));
    const double scale = static_cast<double>(p.M) * p.N * p.K / (static_cast<double>(m) * n * k);
    std::array<double, kFloatGemmCandidates.size()> best;
    best.fill(std::numeric_limits<double>::infinity());
    // Alternating, and each candidate's first run of a shape not its only one: whatever the
    // machine does meanwhile falls on all.
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < kFloatGemmCandidates.size(); ++i) {
        best[i] = std::min(best[i], seconds_of(kFloatGemmCandidates[i], c.data(), a.data(), b.data(), m, n, k, p.ta, p.tb));
      }
    }
    for (size_t i = 0; i < kFloatGemmCandidates.size(); ++i) times.seconds[i] += p.count * scale * best[i];
    ++times.shapes;
  }
  return times;
}

FloatGemm fastest_float_gemm(const FloatGemmTimes& times) {
  size_t kept = 0;
  for (size_t i = 1; i < kFloatGemmCandidates.size(); ++i) {
    if (times.seconds[i] > 0 && times.seconds[i] <= (1 - kFloatGemmMargin) * times.seconds[kept]) kept = i;
  }
  return kFloatGemmCandidates[kept];
}

}  // namespace tessera::kernels
