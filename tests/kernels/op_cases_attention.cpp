// Attention and rotary-embedding cases. T = 67 and T = 130 cross one and two tile boundaries of
// the tiled kernel with a partial last tile; T = 1 is a single query; D = 5 is odd; Hkv < H is
// grouped-query attention (groups of 2 and of 4 query heads, and all heads on one key/value head).
#include <cmath>
#include <string>

#include "harness.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"

namespace tessera::kernels::testing {

namespace {

size_t sz(int a, int b = 1) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

struct AttentionOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int B, Tn, C, H, Hkv;
  int W3() const { return C + 2 * Hkv * (C / H); }
  std::vector<Input> inputs() const { return {{"qkv", sz(B * Tn, W3()), Grad::Written}}; }
  size_t output_size() const { return sz(B * Tn, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>& saved) const {
    saved.assign(1, std::vector<T>(sz(B * H, Tn)));
    attention_forward(out.data(), saved[0].data(), in[0].data(), B, Tn, C, H, Hkv);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>& out, const std::vector<T>& dout, const Buffers<T>& saved,
                Buffers<T>& din) const {
    attention_backward(din[0].data(), dout.data(), in[0].data(), out.data(), saved[0].data(), B, Tn, C, H, Hkv);
  }
  // Softmax attention written out directly: softmax_j(q_t · k_j / sqrt(D)) v_j over j <= t, with
  // query head h reading key/value head kv = h / (H / Hkv).
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const int D = C / H, Ckv = Hkv * D, W = W3();
    const double* qkv = in[0].data();
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        const int kv = h / (H / Hkv);
        for (int t = 0; t < Tn; ++t) {
          std::vector<double> w(sz(t + 1));
          double z = 0;
          for (int j = 0; j <= t; ++j) {
            double s = 0;
            for (int d = 0; d < D; ++d) {
              s += qkv[sz(b * Tn + t, W) + h * D + d] * qkv[sz(b * Tn + j, W) + C + kv * D + d];
            }
            w[j] = std::exp(s / std::sqrt(static_cast<double>(D)));
            z += w[j];
          }
          for (int d = 0; d < D; ++d) {
            double o = 0;
            for (int j = 0; j <= t; ++j) o += w[j] / z * qkv[sz(b * Tn + j, W) + C + Ckv + kv * D + d];
            out[sz(b * Tn + t, C) + h * D + d] = o;
          }
        }
      }
    }
  }
};

struct NaiveAttentionOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int B, Tn, C, H, Hkv;
  std::vector<Input> inputs() const { return {{"qkv", sz(B * Tn, AttentionOp{B, Tn, C, H, Hkv}.W3()), Grad::Written}}; }
  size_t output_size() const { return sz(B * Tn, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>& saved) const {
    saved.assign(1, std::vector<T>(sz(B * H, Tn) * Tn));
    attention_forward_naive(out.data(), saved[0].data(), in[0].data(), B, Tn, C, H, Hkv);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>& saved,
                Buffers<T>& din) const {
    attention_backward_naive(din[0].data(), dout.data(), in[0].data(), saved[0].data(), B, Tn, C, H, Hkv);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    AttentionOp{B, Tn, C, H, Hkv}.reference(in, out);
  }
};

struct RopeOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int B, Tn, C, H, Hkv;
  float theta;
  int W3() const { return C + 2 * Hkv * (C / H); }
  std::vector<Input> inputs() const { return {{"qkv", sz(B * Tn, W3()), Grad::Written}}; }
  size_t output_size() const { return sz(B * Tn, W3()); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    rope_forward(out.data(), in[0].data(), B, Tn, C, H, Hkv, theta);
  }
  template <class T>
  void backward(const Buffers<T>&, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    rope_backward(din[0].data(), dout.data(), B, Tn, C, H, Hkv, theta);
  }
  // As HF Llama: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1), with cos and sin of
  // the angle t * theta^(-2i/D) repeated over both halves of the head.
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const int D = C / H, W = W3();
    const int heads[] = {H, Hkv, Hkv}, start[] = {0, C, C + Hkv * D};  // q, k, v
    for (int r = 0; r < B * Tn; ++r) {
      const int t = r % Tn;
      for (int part = 0; part < 3; ++part) {
        for (int h = 0; h < heads[part]; ++h) {
          const double* x = in[0].data() + sz(r, W) + start[part] + h * D;
          double* y = out.data() + sz(r, W) + start[part] + h * D;
          for (int d = 0; d < D; ++d) {
            if (part == 2) {
              y[d] = x[d];
              continue;
            }
            const int i = d % (D / 2);
            const double angle = t / std::pow(static_cast<double>(theta), 2.0 * i / D);
            const double rotated = d < D / 2 ? -x[d + D / 2] : x[d - D / 2];
            y[d] = x[d] * std::cos(angle) + rotated * std::sin(angle);
          }
        }
      }
    }
  }
};

}  // namespace

std::vector<std::shared_ptr<const OpCase>> attention_cases() {
  return {
      make_case("attention_B1_T1_C12_H3", AttentionOp{1, 1, 12, 3, 3}),
      make_case("attention_B2_T67_C15_H3", AttentionOp{2, 67, 15, 3, 3}),
      make_case("attention_B1_T130_C8_H2", AttentionOp{1, 130, 8, 2, 2}),
      make_case("attention_B2_T67_C16_H4_Hkv2", AttentionOp{2, 67, 16, 4, 2}),
      make_case("attention_B1_T130_C16_H4_Hkv1", AttentionOp{1, 130, 16, 4, 1}),
      make_case("attention_B2_T9_C32_H8_Hkv2", AttentionOp{2, 9, 32, 8, 2}),
      make_case("attention_naive_B1_T1_C12_H3", NaiveAttentionOp{1, 1, 12, 3, 3}),
      make_case("attention_naive_B2_T67_C15_H3", NaiveAttentionOp{2, 67, 15, 3, 3}),
      make_case("attention_naive_B2_T20_C16_H4_Hkv2", NaiveAttentionOp{2, 20, 16, 4, 2}),
      make_case("rope_B1_T1_C12_H3", RopeOp{1, 1, 12, 3, 3, 10000.0f}),
      make_case("rope_B2_T67_C16_H2", RopeOp{2, 67, 16, 2, 2, 10000.0f}),
      make_case("rope_B1_T9_C80_H1_theta500", RopeOp{1, 9, 80, 1, 1, 500.0f}),
      make_case("rope_B2_T9_C32_H4_Hkv2", RopeOp{2, 9, 32, 4, 2, 10000.0f}),
      make_case("attention_B2_T200_C64_H2", AttentionOp{2, 200, 64, 2, 2}),
      make_case("rope_B4_T64_C64_H4", RopeOp{4, 64, 64, 4, 4, 10000.0f}),
  };
}

}  // namespace tessera::kernels::testing
