#pragma once
// Which library, and which width of the blocks a product is cut into, make this machine's float
// products fastest, measured on the products a model's step makes. No library wins everywhere
// (kernels/cpu/matmul.cpp says where each lost), and a CPU's model says little: the thread count,
// the shapes and the core OpenBLAS picked all move the answer. So a run times every candidate,
// alternating so that all see the same machine, and keeps the one whose step would spend least
// time in its products.
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace tessera::kernels {

// out[M,N] = op(a)[M,K] · op(b)[K,N], made `count` times a step.
struct GemmProblem {
  int64_t M = 0, N = 0, K = 0;
  Transpose ta = Transpose::No, tb = Transpose::No;
  double count = 1;
};

// Adds the three products of a linear layer with weight [out, in] over `tokens` rows (kernels/cpu/
// linear.cpp): forward y = x·Wᵀ (tokens x out x in), input gradient dx = dy·W (tokens x in x out)
// and weight gradient dW = dyᵀ·x (out x in x tokens). A shape already listed counts once more.
void add_linear_layer(std::vector<GemmProblem>& problems, int64_t out, int64_t in, int64_t tokens);

// What is measured: both libraries in narrow blocks and in wide ones. The first is what runs until
// a run chooses, and what a near tie keeps.
inline constexpr std::array<FloatGemm, 4> kFloatGemmCandidates{{{FloatGemmLibrary::OneDnn, kNarrowGemmBlock},
                                                               {FloatGemmLibrary::OpenBlas, kNarrowGemmBlock},
                                                               {FloatGemmLibrary::OneDnn, kWideGemmBlock},
                                                               {FloatGemmLibrary::OpenBlas, kWideGemmBlock}}};

// The problems' time per step with each candidate (the sum over problems of count × the best of
// `rounds` timings), in kFloatGemmCandidates' order. A dimension above kMeasuredSizeLimit is
// measured at that size and its time scaled up by the FLOPs: every candidate runs such sizes at
// its steady rate, and the largest product of a GPT-2 step (the head's, 1024 x 50257 x 768) would
// otherwise cost a second and 600 MiB of scratch at start-up.
struct FloatGemmTimes {
  std::array<double, kFloatGemmCandidates.size()> seconds{};
  int shapes = 0;  // problems timed (distinct shapes; each counts as often as a step makes it)
};
inline constexpr int64_t kMeasuredSizeLimit = 4096;
FloatGemmTimes time_float_gemms(const std::vector<GemmProblem>& problems, int rounds = 2);

// The candidates in order, each taken over the one kept so far only when its time is at most
// (1 - kFloatGemmMargin) of that one's: candidates within noise of each other must not swap
// between runs of one machine, which would change the bits a resumed run computes. A time of 0
// (not measured) is never taken.
inline constexpr double kFloatGemmMargin = 0.03;
FloatGemm fastest_float_gemm(const FloatGemmTimes& times);

}  // namespace tessera::kernels
