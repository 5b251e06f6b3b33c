// The ops the harness checks, each with its shapes. Shapes are chosen to break naive code: one
// row, odd channel counts (13 is no multiple of any vector width), sizes past a tile boundary.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/rng.h"
#include "harness.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/swiglu.h"

namespace tessera::kernels::testing {

namespace {

size_t sz(int a, int b = 1) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

struct LinearOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, IC, OC;
  bool bias;
  std::vector<Input> inputs() const {
    std::vector<Input> v{{"inp", sz(N, IC), Grad::Written}, {"weight", sz(OC, IC), Grad::Accumulated, 0.0, 0.3}};
    if (bias) v.push_back({"bias", sz(OC), Grad::Accumulated});
    return v;
  }
  size_t output_size() const { return sz(N, OC); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    linear_forward(out.data(), in[0].data(), in[1].data(), bias ? in[2].data() : nullptr, N, IC, OC);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    linear_backward(din[0].data(), din[1].data(), bias ? din[2].data() : nullptr, dout.data(), in[0].data(),
                    in[1].data(), N, IC, OC);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < OC; ++o) {
        double s = bias ? in[2][o] : 0.0;
        for (int i = 0; i < IC; ++i) s += in[0][sz(n, IC) + i] * in[1][sz(o, IC) + i];
        out[sz(n, OC) + o] = s;
      }
    }
  }
};

// y = x + b on every row: the bias a row-parallel layer adds after its reduction.
struct AddBiasOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, C;
  std::vector<Input> inputs() const { return {{"inp", sz(N, C), Grad::Written}, {"bias", sz(C), Grad::Accumulated}}; }
  size_t output_size() const { return sz(N, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    std::copy(in[0].begin(), in[0].end(), out.begin());
    add_bias(out.data(), in[1].data(), sz(N), sz(C));
  }
  template <class T>
  void backward(const Buffers<T>&, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    std::copy(dout.begin(), dout.end(), din[0].begin());
    add_bias_backward(din[1].data(), dout.data(), sz(N), sz(C));
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) out[sz(n, C) + c] = in[0][sz(n, C) + c] + in[1][c];
    }
  }
};

struct LayerNormOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, C;
  bool bias;
  std::vector<Input> inputs() const {
    std::vector<Input> v{{"inp", sz(N, C), Grad::Written, 0.5, 2.0}, {"weight", sz(C), Grad::Accumulated, 1.0, 0.2}};
    if (bias) v.push_back({"bias", sz(C), Grad::Accumulated});
    return v;
  }
  size_t output_size() const { return sz(N, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>& saved) const {
    saved.assign(2, std::vector<T>(sz(N)));
    layernorm_forward(out.data(), saved[0].data(), saved[1].data(), in[0].data(), in[1].data(),
                      bias ? in[2].data() : nullptr, N, C, T(1e-5));
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>& saved,
                Buffers<T>& din) const {
    layernorm_backward(din[0].data(), din[1].data(), bias ? din[2].data() : nullptr, dout.data(), in[0].data(),
                       in[1].data(), saved[0].data(), saved[1].data(), N, C);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      const double* x = in[0].data() + sz(n, C);
      double m = 0, v = 0;
      for (int c = 0; c < C; ++c) m += x[c] / C;
      for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m) / C;
      for (int c = 0; c < C; ++c) {
        out[sz(n, C) + c] = (x[c] - m) / std::sqrt(v + 1e-5) * in[1][c] + (bias ? in[2][c] : 0.0);
      }
    }
  }
};

struct RmsNormOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, C;
  std::vector<Input> inputs() const {
    return {{"inp", sz(N, C), Grad::Written, 0.3, 1.5}, {"weight", sz(C), Grad::Accumulated, 1.0, 0.2}};
  }
  size_t output_size() const { return sz(N, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>& saved) const {
    saved.assign(1, std::vector<T>(sz(N)));
    rmsnorm_forward(out.data(), saved[0].data(), in[0].data(), in[1].data(), N, C, T(1e-6));
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>& saved,
                Buffers<T>& din) const {
    rmsnorm_backward(din[0].data(), din[1].data(), dout.data(), in[0].data(), in[1].data(), saved[0].data(), N, C);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      const double* x = in[0].data() + sz(n, C);
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += x[c] * x[c] / C;
      for (int c = 0; c < C; ++c) out[sz(n, C) + c] = x[c] / std::sqrt(ms + 1e-6) * in[1][c];
    }
  }
};

struct GeluOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  size_t n;
  // A wide spread reaches both tails, where tanh saturates.
  std::vector<Input> inputs() const { return {{"inp", n, Grad::Written, 0.0, 3.0}}; }
  size_t output_size() const { return n; }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    gelu_forward(out.data(), in[0].data(), n);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    gelu_backward(din[0].data(), in[0].data(), dout.data(), n);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const double pi = std::acos(-1.0);
    for (size_t i = 0; i < n; ++i) {
      const double x = in[0][i];
      out[i] = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
    }
  }
};

// ReLU (squared: relu2) of the inputs moved kMargin away from 0: finite differences across the kink
// at 0 see neither one-sided derivative (ReLU's jumps; squared ReLU's second derivative does), and
// a step of the directional check moves many of the 40000 entries at once. The move is part of the
// op under test (its derivative is 1), so the kernels' own gradients are what is compared.
struct ReluOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  static constexpr double kMargin = 1e-2;
  size_t n;
  bool squared;
  std::vector<Input> inputs() const { return {{"inp", n, Grad::Written, 0.0, 3.0}}; }
  size_t output_size() const { return n; }
  template <class T>
  static std::vector<T> away_from_kink(const std::vector<T>& x) {
    std::vector<T> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] + static_cast<T>(x[i] < T(0) ? -kMargin : kMargin);
    return y;
  }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    const std::vector<T> x = away_from_kink(in[0]);
    if (squared) {
      relu2_forward(out.data(), x.data(), n);
    } else {
      relu_forward(out.data(), x.data(), n);
    }
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    const std::vector<T> x = away_from_kink(in[0]);
    if (squared) {
      relu2_backward(din[0].data(), x.data(), dout.data(), n);
    } else {
      relu_backward(din[0].data(), x.data(), dout.data(), n);
    }
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const std::vector<double> x = away_from_kink(in[0]);
    for (size_t i = 0; i < n; ++i) {
      const double r = x[i] > 0 ? x[i] : 0.0;
      out[i] = squared ? r * r : r;
    }
  }
};

struct SwigluOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  size_t n;
  std::vector<Input> inputs() const {
    return {{"gate", n, Grad::Written, 0.0, 3.0}, {"up", n, Grad::Written, 0.0, 1.0}};
  }
  size_t output_size() const { return n; }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    swiglu_forward(out.data(), in[0].data(), in[1].data(), n);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    swiglu_backward(din[0].data(), din[1].data(), dout.data(), in[0].data(), in[1].data(), n);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (size_t i = 0; i < n; ++i) out[i] = in[0][i] / (1.0 + std::exp(-in[0][i])) * in[1][i];
  }
};

struct SoftmaxOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, C;
  std::vector<Input> inputs() const { return {{"inp", sz(N, C), Grad::Written, 3.0, 2.0}}; }
  size_t output_size() const { return sz(N, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    softmax_forward(out.data(), in[0].data(), N, C);
  }
  template <class T>
  void backward(const Buffers<T>&, const std::vector<T>& out, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    softmax_backward(din[0].data(), dout.data(), out.data(), N, C);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      double z = 0;
      for (int c = 0; c < C; ++c) z += std::exp(in[0][sz(n, C) + c]);
      for (int c = 0; c < C; ++c) out[sz(n, C) + c] = std::exp(in[0][sz(n, C) + c]) / z;
    }
  }
};

// Checks the training kernel: its gradient (written over the logits) against finite differences
// of the per-row losses, with one upstream scale for every row.
struct CrossEntropyOp {
  static constexpr bool kScalarUpstream = true, kHasReference = true;
  static constexpr int kIgnore = -100;
  int N, V;
  std::vector<int32_t> targets;
  CrossEntropyOp(int n, int v) : N(n), V(v), targets(random_ints(sz(n), 7, "ce:targets", 0, v)) {
    // Every third row (from the second) is padding.
    for (int i = 1; i < N; i += 3) targets[i] = kIgnore;
  }
  std::vector<Input> inputs() const { return {{"logits", sz(N, V), Grad::Written, 0.0, 2.0}}; }
  size_t output_size() const { return sz(N); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    int64_t count = 0;
    cross_entropy_forward(out.data(), in[0].data(), targets.data(), N, V, kIgnore, &count);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    std::vector<T> losses(sz(N));
    din[0] = in[0];
    cross_entropy_forward_backward(din[0].data(), losses.data(), targets.data(), N, V, kIgnore, dout[0]);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int n = 0; n < N; ++n) {
      if (targets[n] == kIgnore) {
        out[n] = 0;
        continue;
      }
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(in[0][sz(n, V) + v]);
      out[n] = std::log(z) - in[0][sz(n, V) + targets[n]];
    }
  }
};

struct EmbeddingOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int B, Tn, C, V, max_t;
  bool positions;
  std::vector<int32_t> tokens;
  // A small vocabulary makes ids repeat, which exercises the scatter-add of the backward.
  EmbeddingOp(int b, int t, int c, int v, bool pos)
      : B(b), Tn(t), C(c), V(v), max_t(t + 3), positions(pos), tokens(random_ints(sz(b, t), 11, "emb:tokens", 0, v)) {}
  std::vector<Input> inputs() const {
    std::vector<Input> v{{"wte", sz(V, C), Grad::Accumulated}};
    if (positions) v.push_back({"wpe", sz(max_t, C), Grad::Accumulated});
    return v;
  }
  size_t output_size() const { return sz(B * Tn, C); }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    embedding_forward(out.data(), tokens.data(), in[0].data(), positions ? in[1].data() : nullptr, B, Tn, C, V);
  }
  template <class T>
  void backward(const Buffers<T>&, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    embedding_backward(din[0].data(), positions ? din[1].data() : nullptr, dout.data(), tokens.data(), B, Tn, C);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (int r = 0; r < B * Tn; ++r) {
      for (int c = 0; c < C; ++c) {
        out[sz(r, C) + c] = in[0][sz(tokens[r], C) + c] + (positions ? in[1][sz(r % Tn, C) + c] : 0.0);
      }
    }
  }
};

struct DropoutOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  size_t n;
  float p;
  static constexpr uint64_t kSeed = 1234, kOffset = 77;
  static constexpr uint64_t kStream = stream_id("dropout:test");
  std::vector<Input> inputs() const { return {{"inp", n, Grad::Written}}; }
  size_t output_size() const { return n; }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    dropout_forward(out.data(), in[0].data(), n, p, kSeed, kStream, kOffset);
  }
  template <class T>
  void backward(const Buffers<T>&, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    dropout_backward(din[0].data(), dout.data(), n, p, kSeed, kStream, kOffset);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    for (size_t i = 0; i < n; ++i) {
      const bool keep = uniform(kSeed, kStream, kOffset + i) >= p;
      out[i] = keep ? in[0][i] / (1.0 - static_cast<double>(p)) : 0.0;
    }
  }
};

}  // namespace

std::vector<std::shared_ptr<const OpCase>> dense_cases() {
  return {
      make_case("linear_N1_IC13_OC7_bias", LinearOp{1, 13, 7, true}),
      make_case("linear_N67_IC13_OC5", LinearOp{67, 13, 5, false}),
      make_case("linear_N33_IC40_OC24_bias", LinearOp{33, 40, 24, true}),
      make_case("add_bias_N1_C13", AddBiasOp{1, 13}),
      make_case("add_bias_N67_C13", AddBiasOp{67, 13}),
      make_case("layernorm_N1_C13", LayerNormOp{1, 13, true}),
      make_case("layernorm_N67_C13", LayerNormOp{67, 13, true}),
      make_case("layernorm_N5_C64_nobias", LayerNormOp{5, 64, false}),
      make_case("rmsnorm_N1_C13", RmsNormOp{1, 13}),
      make_case("rmsnorm_N67_C33", RmsNormOp{67, 33}),
      make_case("gelu_n1", GeluOp{1}),
      make_case("gelu_n1037", GeluOp{1037}),
      make_case("relu_n1", ReluOp{1, false}),
      make_case("relu_n1037", ReluOp{1037, false}),
      make_case("relu2_n1", ReluOp{1, true}),
      make_case("relu2_n1037", ReluOp{1037, true}),
      make_case("swiglu_n1", SwigluOp{1}),
      make_case("swiglu_n1037", SwigluOp{1037}),
      make_case("softmax_N1_C13", SoftmaxOp{1, 13}),
      make_case("softmax_N67_C5", SoftmaxOp{67, 5}),
      make_case("softmax_N3_C1", SoftmaxOp{3, 1}),
      make_case("cross_entropy_N1_V13", CrossEntropyOp(1, 13)),
      make_case("cross_entropy_N67_V37", CrossEntropyOp(67, 37)),
      make_case("embedding_B1_T1_C13_V7", EmbeddingOp(1, 1, 13, 7, true)),
      make_case("embedding_B2_T67_C13_V11", EmbeddingOp(2, 67, 13, 11, true)),
      make_case("embedding_B3_T5_C8_V4_nopos", EmbeddingOp(3, 5, 8, 4, false)),
      make_case("dropout_n1037_p30", DropoutOp{1037, 0.3f}),
      make_case("dropout_n13_p0", DropoutOp{13, 0.0f}),
      // Large enough to take the multithreaded paths (detail::kParallelMinWork).
      make_case("linear_N300_IC64_OC70_bias", LinearOp{300, 64, 70, true}),
      make_case("add_bias_N300_C77", AddBiasOp{300, 77}),
      make_case("layernorm_N300_C77", LayerNormOp{300, 77, true}),
      make_case("rmsnorm_N300_C77", RmsNormOp{300, 77}),
      make_case("gelu_n40000", GeluOp{40000}),
      make_case("relu_n40000", ReluOp{40000, false}),
      make_case("relu2_n40000", ReluOp{40000, true}),
      make_case("swiglu_n40000", SwigluOp{40000}),
      make_case("softmax_N200_C100", SoftmaxOp{200, 100}),
      make_case("cross_entropy_N64_V512", CrossEntropyOp(64, 512)),
      make_case("embedding_B4_T64_C96_V50", EmbeddingOp(4, 64, 96, 50, true)),
      make_case("dropout_n40000_p10", DropoutOp{40000, 0.1f}),
  };
}

}  // namespace tessera::kernels::testing
