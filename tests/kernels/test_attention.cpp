// The tiled (flash-style) attention against the naive one that materializes the T×T matrix, in
// float, the precision training runs in. T = 63, 65 and 130 sit on both sides of the tile edges.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
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
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H, H);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H, H);

  std::vector<float> out_ref(out.size()), att(size_t(B) * H * T * T), dqkv_ref(qkv.size());
  attention_forward_naive(out_ref.data(), att.data(), qkv.data(), B, T, C, H, H);
  attention_backward_naive(dqkv_ref.data(), dout.data(), qkv.data(), att.data(), B, T, C, H, H);

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
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H, H);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H, H);
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

// Incremental attention (decoding with a cache) against the full attention's rows: a prefill of
// the first P tokens, then the rest in chunks of `step` tokens (1: token by token), each chunk's
// output equal to the full attention's rows of those positions. Double: to round-off against the
// naive kernel; float: within 1e-5 of the tiled kernel, which training uses. Hkv < H: grouped-query
// attention, whose cache holds the Hkv key/value heads only.
struct DecodeShape {
  int B, T, C, H, Hkv, prefill, step;
  size_t row() const { return size_t(C) + 2 * kv(); }  // W3
  size_t kv() const { return size_t(C) / H * Hkv; }    // Ckv
};

class DecodeAttention : public ::testing::TestWithParam<DecodeShape> {};

template <class T>
void decode_in_chunks(const DecodeShape& s, const std::vector<T>& qkv, std::vector<T>& out, int capacity) {
  const size_t C = size_t(s.C), W = s.row(), Ckv = s.kv();
  std::vector<T> keys(size_t(s.B) * capacity * Ckv, T(-7)), values(keys.size(), T(-7));
  for (int past = 0; past < s.T;) {
    const int n = std::min(past == 0 ? s.prefill : s.step, s.T - past);
    std::vector<T> chunk(size_t(s.B) * n * W), chunk_out(size_t(s.B) * n * C);
    for (int b = 0; b < s.B; ++b) {
      std::copy_n(qkv.begin() + (size_t(b) * s.T + past) * W, size_t(n) * W, chunk.begin() + size_t(b) * n * W);
    }
    attention_decode(chunk_out.data(), keys.data(), values.data(), chunk.data(), s.B, n, past, capacity, s.C, s.H,
                     s.Hkv);
    for (int b = 0; b < s.B; ++b) {
      std::copy_n(chunk_out.begin() + size_t(b) * n * C, size_t(n) * C, out.begin() + (size_t(b) * s.T + past) * C);
    }
    past += n;
  }
  // The cache holds every key and value at its position, and nothing past them was touched.
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < capacity; ++t) {
      for (size_t c = 0; c < Ckv; ++c) {
        const size_t at = (size_t(b) * capacity + t) * Ckv + c;
        ASSERT_EQ(keys[at], t < s.T ? qkv[(size_t(b) * s.T + t) * W + C + c] : T(-7));
        ASSERT_EQ(values[at], t < s.T ? qkv[(size_t(b) * s.T + t) * W + C + Ckv + c] : T(-7));
      }
    }
  }
}

TEST_P(DecodeAttention, MatchesTheFullAttentionRows) {
  const DecodeShape s = GetParam();
  const std::string tag = fmt::format("decode:{},{},{},{}", s.B, s.T, s.C, s.prefill);
  const std::vector<double> qkv = random_normal(size_t(s.B) * s.T * s.row(), 21, tag);
  const int capacity = s.T + 3;  // a cache longer than the sequence, as a model's is

  std::vector<double> want(size_t(s.B) * s.T * s.C), att(size_t(s.B) * s.H * s.T * s.T), got(want.size());
  attention_forward_naive(want.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.H, s.Hkv);
  decode_in_chunks(s, qkv, got, capacity);
  EXPECT_LT(relative_error(got, want), 1e-12);

  const std::vector<float> qkv_f = cast<float>(qkv);
  std::vector<float> want_f(want.size()), lse(size_t(s.B) * s.H * s.T), got_f(want.size());
  attention_forward(want_f.data(), lse.data(), qkv_f.data(), s.B, s.T, s.C, s.H, s.Hkv);
  decode_in_chunks(s, qkv_f, got_f, capacity);
  EXPECT_LT(relative_error(cast<double>(got_f), cast<double>(want_f)), 1e-5);
  // The last row alone, the one sampling reads: also within 1e-5.
  for (int b = 0; b < s.B; ++b) {
    const size_t last = (size_t(b) * s.T + s.T - 1) * s.C;
    const std::vector<double> a(got_f.begin() + last, got_f.begin() + last + s.C);
    const std::vector<double> r(want_f.begin() + last, want_f.begin() + last + s.C);
    EXPECT_LT(relative_error(a, r), 1e-5) << "b=" << b;
  }
}

// T = 300 spans three key tiles of 128; C = 15, H = 3 has an odd head size.
INSTANTIATE_TEST_SUITE_P(Kernels, DecodeAttention,
                         ::testing::Values(DecodeShape{1, 1, 16, 2, 2, 1, 1}, DecodeShape{2, 40, 16, 2, 2, 1, 1},
                                           DecodeShape{2, 67, 15, 3, 3, 20, 1}, DecodeShape{1, 130, 64, 1, 1, 130, 1},
                                           DecodeShape{3, 300, 24, 2, 2, 17, 1}, DecodeShape{2, 129, 32, 4, 4, 64, 7},
                                           DecodeShape{2, 67, 32, 4, 2, 20, 1}, DecodeShape{1, 140, 32, 8, 1, 64, 5}),
                         [](const ::testing::TestParamInfo<DecodeShape>& s) {
                           return fmt::format("B{}_T{}_C{}_H{}_Hkv{}_prefill{}_step{}", s.param.B, s.param.T, s.param.C,
                                              s.param.H, s.param.Hkv, s.param.prefill, s.param.step);
                         });

TEST(KernelAttention, DecodeRefusesPositionsPastTheCache) {
  std::vector<float> qkv(3 * 8 * 2), out(8 * 2), keys(8 * 4), values(8 * 4);
  try {
    attention_decode(out.data(), keys.data(), values.data(), qkv.data(), 1, 2, 3, 4, 8, 2, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 cached and 2 new positions do not fit a cache of 4 positions"),
              std::string::npos)
        << e.what();
  }
}

// Float error against double in an ill-conditioned state: every query aligned with its own key
// (rows peaked on one key, scores in the hundreds), a key component common to all keys (a shift
// of each query's scores that softmax ignores) and a common part in the values. The tiled
// backward must be as accurate as the materialized softmax (PyTorch's formulation) on the same
// float inputs. It once recomputed the probabilities from the float log-sum-exp, whose rounding
// (|lse| 2^-24) came back as a relative error of every probability of the row, where the
// materialized softmax has 1 ulp on the peak; and took the softmax backward's correction from the
// rounded output, rowsum(dO ∘ O), which leaves the keys' common part in dQ. Here that made dq,
// dk and dv 16 to 20 times further from double than the materialized ones.
TEST(KernelAttention, FloatBackwardIsAsAccurateAsAMaterializedSoftmaxOnLargeScores) {
  constexpr int B = 2, T = 150, C = 64, H = 2;  // T crosses the tile edges (64 queries, 128 keys)
  const size_t N = size_t(B) * T;
  std::vector<double> qkv = random_normal(N * 3 * C, 21, "attn:ill:qkv");
  const std::vector<double> common = random_normal(size_t(C), 21, "attn:ill:common");
  for (size_t r = 0; r < N; ++r) {
    double* row = qkv.data() + r * 3 * C;
    for (int c = 0; c < C; ++c) {
      row[c] += 10 * row[C + c];          // q: its own key's direction, 10 times over, plus noise
      row[C + c] += 12 * common[c];       // k: a large common component
      row[2 * C + c] += 3 * common[c];    // v: a common part as well
    }
  }
  const std::vector<float> qkv_f = cast<float>(qkv);
  const std::vector<float> dout_f = cast<float>(random_normal(N * C, 21, "attn:ill:dout"));
  // The double reference on the same (float) inputs.
  const std::vector<double> qkv_d = cast<double>(qkv_f), dout_d = cast<double>(dout_f);
  std::vector<double> out_d(N * C), lse_d(size_t(B) * H * T), dqkv_d(N * 3 * C);
  attention_forward(out_d.data(), lse_d.data(), qkv_d.data(), B, T, C, H, H);
  attention_backward(dqkv_d.data(), dout_d.data(), qkv_d.data(), out_d.data(), lse_d.data(), B, T, C, H, H);
  double max_lse = 0;
  for (double l : lse_d) max_lse = std::max(max_lse, std::fabs(l));
  ASSERT_GT(max_lse, 100.0) << "the case must have large scores";

  std::vector<float> out(N * C), lse(size_t(B) * H * T), dqkv(N * 3 * C);
  attention_forward(out.data(), lse.data(), qkv_f.data(), B, T, C, H, H);
  attention_backward(dqkv.data(), dout_f.data(), qkv_f.data(), out.data(), lse.data(), B, T, C, H, H);
  std::vector<float> out_n(N * C), att(size_t(B) * H * T * T), dqkv_n(N * 3 * C);
  attention_forward_naive(out_n.data(), att.data(), qkv_f.data(), B, T, C, H, H);
  attention_backward_naive(dqkv_n.data(), dout_f.data(), qkv_f.data(), att.data(), B, T, C, H, H);

  auto part = [&](const auto& v, int p) {
    std::vector<double> x;
    for (size_t r = 0; r < N; ++r) {
      for (int c = 0; c < C; ++c) x.push_back(static_cast<double>(v[r * 3 * C + p * C + c]));
    }
    return x;
  };
  EXPECT_LT(relative_error(cast<double>(out), out_d), 1.5 * relative_error(cast<double>(out_n), out_d) + 1e-7);
  for (int p = 0; p < 3; ++p) {
    const double tiled = relative_error(part(dqkv, p), part(dqkv_d, p));
    const double naive = relative_error(part(dqkv_n, p), part(dqkv_d, p));
    EXPECT_LT(tiled, 1.5 * naive + 1e-7) << "d" << "qkv"[p] << ": tiled " << tiled << ", materialized " << naive;
    RecordProperty(std::string("d") + "qkv"[p] + "_tiled_over_materialized", std::to_string(tiled / naive));
  }
}

TEST(KernelAttention, RejectsHeadsThatDoNotDivideChannels) {
  std::vector<float> qkv(3 * 10), out(10), lse(3);
  try {
    attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 10, 3, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("C=10 must be a positive multiple of the number of heads H=3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::kernels::testing
