// The tiled (flash-style) attention against the naive one that materializes the T×T matrix, in
// float, the precision training runs in. T = 63, 65 and 130 sit on both sides of the tile edges.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "harness.h"
#include "kernels/cpu/attention.h"

namespace tessera::kernels::testing {
namespace {

struct Shape {
  int B, T, C, H;
};

class TiledAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(TiledAttention, MatchesNaiveForwardAndBackward) {
  const auto [B, T, C, H] = GetParam();
  const std::string tag = fmt::format("attn:{},{},{}", B, T, C);
  const std::vector<float> qkv = cast<float>(random_normal(size_t(B) * T * 3 * C, 5, tag + ":qkv"));
  const std::vector<float> dout = cast<float>(random_normal(size_t(B) * T * C, 5, tag + ":dout"));

  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * H * T), dqkv(qkv.size());
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H);

  std::vector<float> out_ref(out.size()), att(size_t(B) * H * T * T), dqkv_ref(qkv.size());
  attention_forward_naive(out_ref.data(), att.data(), qkv.data(), B, T, C, H);
  attention_backward_naive(dqkv_ref.data(), dout.data(), qkv.data(), att.data(), B, T, C, H);

  EXPECT_LT(relative_error(cast<double>(out), cast<double>(out_ref)), 1e-5);
  EXPECT_LT(relative_error(cast<double>(dqkv), cast<double>(dqkv_ref)), 1e-5);
  // Each third of dqkv separately, so a wrong dq cannot hide behind large dk and dv.
  for (int part = 0; part < 3; ++part) {
    std::vector<double> a, b;
    for (size_t r = 0; r < size_t(B) * T; ++r) {
      for (int c = 0; c < C; ++c) {
        a.push_back(dqkv[r * 3 * C + part * C + c]);
        b.push_back(dqkv_ref[r * 3 * C + part * C + c]);
      }
    }
    EXPECT_LT(relative_error(a, b), 1e-5) << "part "
                                          << "qkv"[part];
  }
  // The saved log-sum-exp: recompute it from the naive probabilities of query t and key 0,
  // lse = s_t0 - log p_t0, with s_t0 the scaled score.
  const int D = C / H;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        double s = 0;
        for (int d = 0; d < D; ++d) {
          s += double(qkv[(size_t(b) * T + t) * 3 * C + h * D + d]) * qkv[size_t(b) * T * 3 * C + C + h * D + d];
        }
        s /= std::sqrt(double(D));
        const double p0 = att[((size_t(b) * H + h) * T + t) * T];
        ASSERT_NEAR(lse[(size_t(b) * H + h) * T + t], s - std::log(p0), 1e-4) << "b=" << b << " h=" << h << " t=" << t;
      }
    }
  }
}

TEST_P(TiledAttention, RepeatsBitForBit) {
  const auto [B, T, C, H] = GetParam();
  const std::vector<float> qkv = cast<float>(random_normal(size_t(B) * T * 3 * C, 9, "attn:repeat"));
  const std::vector<float> dout = cast<float>(random_normal(size_t(B) * T * C, 9, "attn:repeat:dout"));
  std::vector<std::vector<float>> outs, grads;
  for (int run = 0; run < 2; ++run) {
    std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * H * T), dqkv(qkv.size());
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H);
    outs.push_back(out);
    grads.push_back(dqkv);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(grads[0], grads[1]);
}

INSTANTIATE_TEST_SUITE_P(Kernels, TiledAttention,
                         ::testing::Values(Shape{1, 1, 64, 1}, Shape{2, 1, 24, 3}, Shape{1, 63, 48, 4},
                                           Shape{2, 65, 24, 3}, Shape{1, 64, 128, 2}, Shape{2, 130, 128, 2},
                                           Shape{1, 130, 15, 3}, Shape{3, 200, 96, 1}),
                         [](const ::testing::TestParamInfo<Shape>& s) {
                           return fmt::format("B{}_T{}_C{}_H{}", s.param.B, s.param.T, s.param.C, s.param.H);
                         });

TEST(KernelAttention, RejectsHeadsThatDoNotDivideChannels) {
  std::vector<float> qkv(3 * 10), out(10), lse(3);
  try {
    attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 10, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("C=10 must be a positive multiple of the number of heads H=3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::kernels::testing
