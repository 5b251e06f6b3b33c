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

double seconds_of(FloatGemmLibrary library, float* out, const float* a, const float* b, int M, int N, int K,
                  Transpose ta, Transpose tb) {
  const auto start = std::chrono::steady_clock::now();
  float_matmul_by(library, out, a, b, M, N, K, ta, tb);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FloatGemmTimes time_float_gemm_libraries(const std::vector<GemmProblem>& problems, int rounds) {
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
    double onednn = std::numeric_limits<double>::infinity(), openblas = onednn;
    // Alternating, and each library's first run of a shape not its only one: whatever the machine
    // does meanwhile falls on both.
    auto time_by = [&](FloatGemmLibrary library) {
      return seconds_of(library, c.data(), a.data(), b.data(), m, n, k, p.ta, p.tb);
    };
    for (int round = 0; round < rounds; ++round) {
      onednn = std::min(onednn, time_by(FloatGemmLibrary::OneDnn));
      openblas = std::min(openblas, time_by(FloatGemmLibrary::OpenBlas));
    }
    times.onednn_seconds += p.count * scale * onednn;
    times.openblas_seconds += p.count * scale * openblas;
    ++times.shapes;
  }
  return times;
}

FloatGemmLibrary faster_float_gemm(const FloatGemmTimes& times) {
  return times.openblas_seconds > 0 && times.openblas_seconds <= (1 - kFloatGemmMargin) * times.onednn_seconds
             ? FloatGemmLibrary::OpenBlas
             : FloatGemmLibrary::OneDnn;
}

}  // namespace tessera::kernels
