#include "kernels/cpu/moe_router.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::kernels {

template <class T>
void moe_route(T* probs, T* lse, int32_t* choice, T* gate, int32_t* slot, int32_t* load, const T* logits, int N,
               int E, int k, int capacity) {
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<size_t>(n) * E;
    T* p = probs + static_cast<size_t>(n) * E;
    T m = z[0];
    for (int e = 1; e < E; ++e) m = std::max(m, z[e]);
    T sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(z[e] - m);
    const T log_sum = std::log(sum);
    lse[n] = m + log_sum;
    for (int e = 0; e < E; ++e) p[e] = std::exp(z[e] - m - log_sum);
    // The k most probable experts, ties to the lower index: k is 1 or 2, so a scan per choice.
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken = taken || choice[static_cast<size_t>(n) * k + i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      choice[static_cast<size_t>(n) * k + j] = best;
      gate[static_cast<size_t>(n) * k + j] = p[best];
    }
  }
  std::fill(load, load + E, 0);
  for (int j = 0; j < k; ++j) {
    for (int n = 0; n < N; ++n) {
      const size_t i = static_cast<size_t>(n) * k + j;
      const int e = choice[i];
      slot[i] = load[e] < capacity ? load[e]++ : -1;
    }
  }
}

template <class T>
T moe_aux_loss(T* dprob, const T* probs, const int32_t* choice, int N, int E, int k) {
  std::vector<T> first(static_cast<size_t>(E), T(0)), mean(static_cast<size_t>(E), T(0));
  for (int n = 0; n < N; ++n) {
    first[static_cast<size_t>(choice[static_cast<size_t>(n) * k])] += T(1);
    for (int e = 0; e < E; ++e) mean[static_cast<size_t>(e)] += probs[static_cast<size_t>(n) * E + e];
  }
  T aux = 0;
  for (int e = 0; e < E; ++e) {
    const T f = first[static_cast<size_t>(e)] / N, P = mean[static_cast<size_t>(e)] / N;
    aux += f * P;
    if (dprob != nullptr) dprob[e] = T(E) * f / N;
  }
  return T(E) * aux;
}

template <class T>
T moe_z_loss(const T* lse, int N) {
  T z = 0;
  for (int n = 0; n < N; ++n) z += lse[n] * lse[n];
  return z / N;
}

template <class T>
void moe_router_backward(T* dlogits, const T* probs, const T* lse, const int32_t* choice, const T* dgate,
                         const T* dprob, compute_t<T> aux_coef, compute_t<T> z_coef, int N, int E, int k) {
  for (int n = 0; n < N; ++n) {
    const T* p = probs + static_cast<size_t>(n) * E;
    T* d = dlogits + static_cast<size_t>(n) * E;
    for (int e = 0; e < E; ++e) d[e] = aux_coef != 0 ? aux_coef * dprob[e] : T(0);
    for (int j = 0; j < k; ++j) d[choice[static_cast<size_t>(n) * k + j]] += dgate[static_cast<size_t>(n) * k + j];
    // softmax backward: p · (dp - Σ dp · p)
    T dot = 0;
    for (int e = 0; e < E; ++e) dot += d[e] * p[e];
    const T z = z_coef * T(2) / N * lse[n];
    for (int e = 0; e < E; ++e) d[e] = p[e] * (d[e] - dot) + z * p[e];
  }
}

template <class T>
void gather_rows(T* out, const T* x, const int32_t* rows, const compute_t<T>* scale, size_t R, size_t C) {
  for (size_t r = 0; r < R; ++r) {
    const T* in = x + static_cast<size_t>(rows[r]) * C;
    if (scale == nullptr) {
      std::copy_n(in, C, out + r * C);
      continue;
    }
    const compute_t<T> s = scale[r];
#pragma omp simd
    for (size_t c = 0; c < C; ++c) out[r * C + c] = store<T>(s * load(in[c]));
  }
}

template <class T>
void scatter_add_rows(T* y, const T* src, const int32_t* rows, const compute_t<T>* scale, size_t R, size_t C) {
  for (size_t r = 0; r < R; ++r) {
    T* out = y + static_cast<size_t>(rows[r]) * C;
    const T* in = src + r * C;
    const compute_t<T> s = scale != nullptr ? scale[r] : compute_t<T>(1);
#pragma omp simd
    for (size_t c = 0; c < C; ++c) out[c] = store<T>(load(out[c]) + s * load(in[c]));
  }
}

template <class T>
void gathered_row_dots(compute_t<T>* dscale, const T* dy, const T* src, const int32_t* rows, size_t R, size_t C) {
  for (size_t r = 0; r < R; ++r) {
    const T* g = dy + static_cast<size_t>(rows[r]) * C;
    const T* in = src + r * C;
    compute_t<T> s = 0;
    for (size_t c = 0; c < C; ++c) s += load(g[c]) * load(in[c]);
    dscale[r] = s;
  }
}

#define TS_MOE_ROUTER(T)                                                                                             \
  template void moe_route<T>(T*, T*, int32_t*, T*, int32_t*, int32_t*, const T*, int, int, int, int);                \
  template T moe_aux_loss<T>(T*, const T*, const int32_t*, int, int, int);                                          \
  template T moe_z_loss<T>(const T*, int);                                                                           \
  template void moe_router_backward<T>(T*, const T*, const T*, const int32_t*, const T*, const T*, T, T, int, int, \
                                       int);
TS_MOE_ROUTER(float)
TS_MOE_ROUTER(double)
#undef TS_MOE_ROUTER

#define TS_MOE_ROWS(T)                                                                                         \
  template void gather_rows<T>(T*, const T*, const int32_t*, const compute_t<T>*, size_t, size_t);                                  \
  template void scatter_add_rows<T>(T*, const T*, const int32_t*, const compute_t<T>*, size_t, size_t);        \
  template void gathered_row_dots<T>(compute_t<T>*, const T*, const T*, const int32_t*, size_t, size_t);
TS_MOE_ROWS(float)
TS_MOE_ROWS(double)
TS_MOE_ROWS(bf16)
TS_MOE_ROWS(f16)
#undef TS_MOE_ROWS

}  // namespace tessera::kernels
