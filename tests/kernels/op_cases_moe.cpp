// The router of a mixture-of-experts layer, checked by the harness like every other op: its gates
// (with the capacity's drops) and its two losses, each against finite differences in double and a
// plain-loop reference written from the papers (Switch eq. 4, ST-MoE's z-loss).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness.h"
#include "kernels/cpu/moe_router.h"

namespace tessera::kernels::testing {

namespace {

size_t sz(int a, int b = 1) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

// The routing as written in the papers, in double: softmax, the k best (ties to the lower index),
// and the capacity filled by first choices, then second choices, tokens in order.
struct NaiveRouting {
  std::vector<double> probs, lse;
  std::vector<int> choice, slot;
  NaiveRouting(const std::vector<double>& logits, int N, int E, int k, int capacity)
      : probs(sz(N, E)), lse(sz(N)), choice(sz(N, k)), slot(sz(N, k)) {
    for (int n = 0; n < N; ++n) {
      double z = 0;
      for (int e = 0; e < E; ++e) z += std::exp(logits[sz(n, E) + e]);
      lse[n] = std::log(z);
      for (int e = 0; e < E; ++e) probs[sz(n, E) + e] = std::exp(logits[sz(n, E) + e]) / z;
      std::vector<int> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return probs[sz(n, E) + a] > probs[sz(n, E) + b]; });
      for (int j = 0; j < k; ++j) choice[sz(n, k) + j] = order[static_cast<size_t>(j)];
    }
    std::vector<int> used(static_cast<size_t>(E), 0);
    for (int j = 0; j < k; ++j) {
      for (int n = 0; n < N; ++n) {
        int& u = used[static_cast<size_t>(choice[sz(n, k) + j])];
        slot[sz(n, k) + j] = u < capacity ? u++ : -1;
      }
    }
  }
};

// gates [N, k] of the kept choices (0 where the capacity dropped one) from logits [N, E].
struct MoeGatesOp {
  static constexpr bool kScalarUpstream = false, kHasReference = true;
  int N, E, k, capacity;
  std::vector<Input> inputs() const { return {{"logits", sz(N, E), Grad::Written, 0.0, 1.5}}; }
  size_t output_size() const { return sz(N, k); }
  template <class T>
  struct Routed {
    std::vector<T> probs, lse, gate;
    std::vector<int32_t> choice, slot, load;
  };
  template <class T>
  Routed<T> route(const std::vector<T>& logits) const {
    Routed<T> r{std::vector<T>(sz(N, E)), std::vector<T>(sz(N)), std::vector<T>(sz(N, k)),
                std::vector<int32_t>(sz(N, k)), std::vector<int32_t>(sz(N, k)), std::vector<int32_t>(sz(E))};
    moe_route(r.probs.data(), r.lse.data(), r.choice.data(), r.gate.data(), r.slot.data(), r.load.data(),
              logits.data(), N, E, k, capacity);
    return r;
  }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    const Routed<T> r = route(in[0]);
    for (size_t i = 0; i < out.size(); ++i) out[i] = r.slot[i] >= 0 ? r.gate[i] : T(0);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    const Routed<T> r = route(in[0]);
    std::vector<T> dgate(dout.size());
    for (size_t i = 0; i < dout.size(); ++i) dgate[i] = r.slot[i] >= 0 ? dout[i] : T(0);
    moe_router_backward<T>(din[0].data(), r.probs.data(), r.lse.data(), r.choice.data(), dgate.data(), nullptr, T(0),
                           T(0), N, E, k);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const NaiveRouting r(in[0], N, E, k, capacity);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < k; ++j) {
        const size_t i = sz(n, k) + j;
        out[i] = r.slot[i] >= 0 ? r.probs[sz(n, E) + r.choice[i]] : 0.0;
      }
    }
  }
};

// aux_coef · aux + z_coef · z of a routing, one scalar.
struct MoeRouterLossOp {
  static constexpr bool kScalarUpstream = true, kHasReference = true;
  int N, E, k;
  double aux_coef, z_coef;
  std::vector<Input> inputs() const { return {{"logits", sz(N, E), Grad::Written, 0.0, 1.5}}; }
  size_t output_size() const { return 1; }
  template <class T>
  void forward(const Buffers<T>& in, std::vector<T>& out, Buffers<T>&) const {
    std::vector<T> probs(sz(N, E)), lse(sz(N)), gate(sz(N, k));
    std::vector<int32_t> choice(sz(N, k)), slot(sz(N, k)), load(sz(E));
    moe_route(probs.data(), lse.data(), choice.data(), gate.data(), slot.data(), load.data(), in[0].data(), N, E, k,
              N);
    out[0] = static_cast<T>(aux_coef) * moe_aux_loss<T>(nullptr, probs.data(), choice.data(), N, E, k) +
             static_cast<T>(z_coef) * moe_z_loss<T>(lse.data(), N);
  }
  template <class T>
  void backward(const Buffers<T>& in, const std::vector<T>&, const std::vector<T>& dout, const Buffers<T>&,
                Buffers<T>& din) const {
    std::vector<T> probs(sz(N, E)), lse(sz(N)), gate(sz(N, k)), dprob(sz(E)), dgate(sz(N, k), T(0));
    std::vector<int32_t> choice(sz(N, k)), slot(sz(N, k)), load(sz(E));
    moe_route(probs.data(), lse.data(), choice.data(), gate.data(), slot.data(), load.data(), in[0].data(), N, E, k,
              N);
    moe_aux_loss<T>(dprob.data(), probs.data(), choice.data(), N, E, k);
    moe_router_backward<T>(din[0].data(), probs.data(), lse.data(), choice.data(), dgate.data(), dprob.data(),
                           static_cast<T>(aux_coef) * dout[0], static_cast<T>(z_coef) * dout[0], N, E, k);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const {
    const NaiveRouting r(in[0], N, E, k, N);
    double aux = 0, z = 0;
    for (int e = 0; e < E; ++e) {
      double f = 0, P = 0;
      for (int n = 0; n < N; ++n) {
        f += r.choice[sz(n, k)] == e ? 1.0 : 0.0;
        P += r.probs[sz(n, E) + e];
      }
      aux += (f / N) * (P / N);
    }
    for (int n = 0; n < N; ++n) z += r.lse[n] * r.lse[n];
    out[0] = aux_coef * E * aux + z_coef * z / N;
  }
};

}  // namespace

std::vector<std::shared_ptr<const OpCase>> moe_cases() {
  return {
      make_case("moe_gates_N1_E4_k1", MoeGatesOp{1, 4, 1, 1}),
      make_case("moe_gates_N13_E4_k1_cap3", MoeGatesOp{13, 4, 1, 3}),  // tight: tokens drop
      make_case("moe_gates_N13_E5_k2_cap4", MoeGatesOp{13, 5, 2, 4}),
      make_case("moe_gates_N40_E8_k2_nodrop", MoeGatesOp{40, 8, 2, 40}),
      make_case("moe_router_loss_N13_E4_k1", MoeRouterLossOp{13, 4, 1, 0.5, 0.25}),
      make_case("moe_router_loss_N29_E6_k2", MoeRouterLossOp{29, 6, 2, 1.0, 0.0}),
      make_case("moe_router_loss_N7_E3_k2_z", MoeRouterLossOp{7, 3, 2, 0.0, 1.0}),
  };
}

}  // namespace tessera::kernels::testing
