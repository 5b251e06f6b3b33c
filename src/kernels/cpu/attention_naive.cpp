// The reference attention: plain loops over a materialized att[B,H,T,T]. Its job is to be
// obviously right, so the tiled kernel can be tested against it.
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention.h"

namespace tessera::kernels {

namespace {

template <class T>
void naive_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int H, int Hkv) {
  const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, "attention_forward_naive");
  const int D = heads.D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const size_t row3 = static_cast<size_t>(heads.row());
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<size_t>(b) * Tn * row3;
      for (int t = 0; t < Tn; ++t) {
        const T* q = base + t * row3 + heads.query(h);
        T* a = att + ((static_cast<size_t>(b) * H + h) * Tn + t) * Tn;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j <= t; ++j) {
          const T* k = base + j * row3 + heads.key(h);
          T s = 0;
          for (int d = 0; d < D; ++d) s += q[d] * k[d];
          a[j] = s * scale;
          mx = a[j] > mx ? a[j] : mx;
        }
        T sum = 0;
        for (int j = 0; j <= t; ++j) {
          a[j] = std::exp(a[j] - mx);
          sum += a[j];
        }
        for (int j = 0; j <= t; ++j) a[j] /= sum;
        for (int j = t + 1; j < Tn; ++j) a[j] = 0;
        T* o = out + (static_cast<size_t>(b) * Tn + t) * C + static_cast<size_t>(h) * D;
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + heads.value(h);
          for (int d = 0; d < D; ++d) o[d] += a[j] * v[d];
        }
      }
    }
  }
}

template <class T>
void naive_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int H, int Hkv) {
  const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, "attention_backward_naive");
  const int D = heads.D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const size_t row3 = static_cast<size_t>(heads.row());
  const size_t rows = static_cast<size_t>(B) * Tn * row3;
  for (size_t i = 0; i < rows; ++i) dqkv[i] = 0;
  // One sequence per thread: dk and dv of a key collect contributions from every later query of
  // every query head of its group.
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<size_t>(b) * Tn * row3;
      T* dbase = dqkv + static_cast<size_t>(b) * Tn * row3;
      for (int t = 0; t < Tn; ++t) {
        const T* a = att + ((static_cast<size_t>(b) * H + h) * Tn + t) * Tn;
        const T* dy = dout + (static_cast<size_t>(b) * Tn + t) * C + heads.query(h);
        const T* q = base + t * row3 + heads.query(h);
        T* dq = dbase + t * row3 + heads.query(h);
        // dP[j] = dy · v_j; softmax backward: dS[j] = P[j] (dP[j] - Σ_i P[i] dP[i]).
        T dot = 0;
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + heads.value(h);
          T* dv = dbase + j * row3 + heads.value(h);
          T dp = 0;
          for (int d = 0; d < D; ++d) {
            dp += dy[d] * v[d];
            dv[d] += a[j] * dy[d];
          }
          dot += a[j] * dp;
        }
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + heads.value(h);
          const T* k = base + j * row3 + heads.key(h);
          T* dk = dbase + j * row3 + heads.key(h);
          T dp = 0;
          for (int d = 0; d < D; ++d) dp += dy[d] * v[d];
          const T ds = a[j] * (dp - dot) * scale;
          for (int d = 0; d < D; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
  }
}

}  // namespace

template <class T>
void attention_forward_naive(T* out, T* att, const T* qkv, int B, int Tn, int C, int H, int Hkv) {
  if constexpr (is_half_v<T>) {
    // The float reference on a widened qkv; out and att rounded to T once.
    const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, "attention_forward_naive");
    const size_t tokens = static_cast<size_t>(B) * Tn;
    const std::vector<float> wide_qkv = widened(qkv, tokens * heads.row());
    std::vector<float> wide_out(tokens * C), wide_att(static_cast<size_t>(B) * H * Tn * Tn);
    naive_forward<float>(wide_out.data(), wide_att.data(), wide_qkv.data(), B, Tn, C, H, Hkv);
    narrow<T>(out, wide_out.data(), wide_out.size());
    narrow<T>(att, wide_att.data(), wide_att.size());
  } else {
    naive_forward<T>(out, att, qkv, B, Tn, C, H, Hkv);
  }
}

template <class T>
void attention_backward_naive(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int H, int Hkv) {
  if constexpr (is_half_v<T>) {
    // The float reference on widened dout, qkv and att; dqkv rounded to T once.
    const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, "attention_backward_naive");
    const size_t tokens = static_cast<size_t>(B) * Tn;
    const std::vector<float> wide_dout = widened(dout, tokens * C);
    const std::vector<float> wide_qkv = widened(qkv, tokens * heads.row());
    const std::vector<float> wide_att = widened(att, static_cast<size_t>(B) * H * Tn * Tn);
    std::vector<float> wide_dqkv(wide_qkv.size());
    naive_backward<float>(wide_dqkv.data(), wide_dout.data(), wide_qkv.data(), wide_att.data(), B, Tn, C, H, Hkv);
    narrow<T>(dqkv, wide_dqkv.data(), wide_dqkv.size());
  } else {
    naive_backward<T>(dqkv, dout, qkv, att, B, Tn, C, H, Hkv);
  }
}

template void attention_forward_naive<float>(float*, float*, const float*, int, int, int, int, int);
template void attention_forward_naive<double>(double*, double*, const double*, int, int, int, int, int);
template void attention_forward_naive<bf16>(bf16*, bf16*, const bf16*, int, int, int, int, int);
template void attention_forward_naive<f16>(f16*, f16*, const f16*, int, int, int, int, int);
template void attention_backward_naive<float>(float*, const float*, const float*, const float*, int, int, int, int, int);
template void attention_backward_naive<double>(double*, const double*, const double*, const double*, int, int, int, int,
                                               int);
template void attention_backward_naive<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int, int, int);
template void attention_backward_naive<f16>(f16*, const f16*, const f16*, const f16*, int, int, int, int, int);

}  // namespace tessera::kernels
