// Tiled causal attention (FlashAttention-2 on the CPU). For each (batch, head), queries are cut
// into blocks of kBlockQ and keys into tiles of kBlockK. Forward: per query block, an online
// softmax runs over the key tiles up to the diagonal with two GEMMs per tile; only the log-sum-exp
// of each query row is saved. Backward: per (batch, head), every tile recomputes the
// probabilities from Q, K and the log-sum-exp and does five GEMMs.
//
// Layout: tiles are held transposed, keys × queries (Sᵀ = K Qᵀ), with Qᵀ (and dOᵀ) copied once
// per query block. Every GEMM is then NN or TN, which OpenBLAS runs with its small-matrix kernels
// about a third faster than the NT products of the textbook layout, and the softmax runs along
// rows of queries: per-query maxima and sums are plain vector operations, with no horizontal
// reduction per row.
//
// Threading: the forward runs an OpenMP loop over (batch, head, query block) items, the backward
// over (batch, head) items, and every item calls BLAS on its own tiles. The OpenMP build of
// OpenBLAS asks omp_in_parallel() before threading a call and runs it on the calling thread alone
// inside an active parallel region (checked by interposing omp_in_parallel: true for every tile
// call, and no BLAS worker threads start), so the cores are shared out once, by our loop, and
// never oversubscribed. Each item writes only its own rows of out and lse, or its own head's
// slice of dqkv, so items need no synchronization.

#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {

// 64 queries × 128 keys: the tiles (32 KiB in float) stay in L1/L2, and each BLAS call is long
// enough to amortize its fixed cost. Scratch lives on the stack, so the head dimension is capped
// (GPT-2 uses 64, Llama 128).
constexpr int kBlockQ = 64;
constexpr int kBlockK = 128;
constexpr int kMaxHeadDim = 256;

struct Shape {
  int B, Tn, C, H, D;
  int ld_qkv;  // 3C: distance between tokens in qkv and dqkv
  int ld_out;  // C: distance between tokens in out and dout
  int blocks;  // query blocks per sequence

  size_t token(int b, int t) const { return static_cast<size_t>(b) * Tn + t; }
};

Shape make_shape(int B, int Tn, int C, int H, const char* name) {
  TS_CHECK(B >= 0 && Tn >= 0 && H > 0 && C > 0 && C % H == 0,
           "{}: C={} must be a positive multiple of the number of heads H={} (B={}, T={})", name, C, H, B, Tn);
  TS_CHECK(C / H <= kMaxHeadDim, "{}: head dimension D = C/H = {} is above the supported maximum of {}", name, C / H,
           kMaxHeadDim);
  return Shape{B, Tn, C, H, C / H, 3 * C, C, (Tn + kBlockQ - 1) / kBlockQ};
}

// Causality: key k0 + j is visible to the queries q0 + i with i >= first_query(...).
inline int first_query(int q0, int k0, int j, int nq) { return std::clamp(k0 + j - q0, 0, nq); }

// dst[D, kBlockQ] = the nq rows of src (row stride ld) transposed.
template <class T>
void transpose_block(T* dst, const T* src, int nq, int D, int ld) {
  for (int i = 0; i < nq; ++i) {
    const T* row = src + static_cast<size_t>(i) * ld;
    for (int d = 0; d < D; ++d) dst[d * kBlockQ + i] = row[d];
  }
}

// One query block of one (b, h): online softmax over the key tiles up to the diagonal.
template <class T>
void forward_query_block(T* out, T* lse, const T* qkv, const Shape& s, int b, int h, int qb, T scale) {
  const int q0 = qb * kBlockQ;
  const int nq = std::min(kBlockQ, s.Tn - q0);
  const int q_end = q0 + nq;
  const size_t head = static_cast<size_t>(h) * s.D;
  T* o = out + s.token(b, q0) * s.ld_out + head;

  T qt[kMaxHeadDim * kBlockQ];  // Qᵀ [D, kBlockQ]
  T pt[kBlockK * kBlockQ];      // Sᵀ, then Pᵀ in place [kBlockK, kBlockQ]
  T row_max[kBlockQ], row_sum[kBlockQ], tile_max[kBlockQ], tile_sum[kBlockQ], alpha[kBlockQ];
  transpose_block(qt, qkv + s.token(b, q0) * s.ld_qkv + head, nq, s.D, s.ld_qkv);
  std::fill(row_max, row_max + kBlockQ, -std::numeric_limits<T>::infinity());
  std::fill(row_sum, row_sum + kBlockQ, T(0));

  for (int k0 = 0; k0 < q_end; k0 += kBlockK) {
    const int nk = std::min(kBlockK, q_end - k0);  // no key past the block's last query
    const T* k = qkv + s.token(b, k0) * s.ld_qkv + s.C + head;
    const T* v = k + s.C;
    gemm<T>(Transpose::No, Transpose::No, nk, nq, s.D, scale, k, s.ld_qkv, qt, kBlockQ, T(0), pt, kBlockQ);
    std::copy(row_max, row_max + kBlockQ, tile_max);
    for (int j = 0; j < nk; ++j) {
      const T* sr = pt + j * kBlockQ;
#pragma omp simd
      for (int i = first_query(q0, k0, j, nq); i < nq; ++i) tile_max[i] = sr[i] > tile_max[i] ? sr[i] : tile_max[i];
    }
    // Every query sees key 0 in the first tile, so the maxima are finite from then on;
    // exp(-inf) = 0 makes the first rescale harmless.
#pragma omp simd
    for (int i = 0; i < nq; ++i) {
      alpha[i] = detail::vexp<T>(row_max[i] - tile_max[i]);
      tile_sum[i] = 0;
    }
    for (int j = 0; j < nk; ++j) {
      T* pr = pt + j * kBlockQ;
      const int first = first_query(q0, k0, j, nq);
      for (int i = 0; i < first; ++i) pr[i] = 0;
#pragma omp simd
      for (int i = first; i < nq; ++i) {
        pr[i] = detail::vexp<T>(pr[i] - tile_max[i]);
        tile_sum[i] += pr[i];
      }
    }
    for (int i = 0; i < nq; ++i) {
      row_sum[i] = row_sum[i] * alpha[i] + tile_sum[i];
      row_max[i] = tile_max[i];
      if (k0 > 0 && alpha[i] != T(1)) {
        T* orow = o + static_cast<size_t>(i) * s.ld_out;
        const T a = alpha[i];
#pragma omp simd
        for (int d = 0; d < s.D; ++d) orow[d] *= a;
      }
    }
    // O += P V = (Pᵀ)ᵀ V. The first tile overwrites out (beta = 0), later ones accumulate.
    gemm<T>(Transpose::Yes, Transpose::No, nq, s.D, nk, T(1), pt, kBlockQ, v, s.ld_qkv, k0 == 0 ? T(0) : T(1), o,
            s.ld_out);
  }
  T* l = lse + (static_cast<size_t>(b) * s.H + h) * s.Tn + q0;
  for (int i = 0; i < nq; ++i) {
    const T inv = T(1) / row_sum[i];
    T* orow = o + static_cast<size_t>(i) * s.ld_out;
#pragma omp simd
    for (int d = 0; d < s.D; ++d) orow[d] *= inv;
    l[i] = row_max[i] + std::log(row_sum[i]);
  }
}

// All tiles of one (b, h). The item owns its head's slice of dqkv, so dQ, dK and dV accumulate
// in place with no partial buffers.
template <class T>
void backward_head(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, const Shape& s, int b, int h,
                   T scale) {
  const size_t head = static_cast<size_t>(h) * s.D;
  for (int t = 0; t < s.Tn; ++t) {
    T* d = dqkv + s.token(b, t) * s.ld_qkv + head;
    std::fill(d, d + s.D, T(0));
    std::fill(d + s.C, d + s.C + s.D, T(0));
    std::fill(d + 2 * s.C, d + 2 * s.C + s.D, T(0));
  }
  T qt[kMaxHeadDim * kBlockQ];   // Qᵀ
  T dyt[kMaxHeadDim * kBlockQ];  // dOᵀ
  T pt[kBlockK * kBlockQ];       // Pᵀ
  T dst[kBlockK * kBlockQ];      // dPᵀ, then dSᵀ (scale folded in)
  T delta[kBlockQ];              // rowsum(dO ∘ O) = Σ_j P dP, the softmax backward's correction
  const T* l_head = lse + (static_cast<size_t>(b) * s.H + h) * s.Tn;

  for (int qb = 0; qb < s.blocks; ++qb) {
    const int q0 = qb * kBlockQ;
    const int nq = std::min(kBlockQ, s.Tn - q0);
    const int q_end = q0 + nq;
    const T* q = qkv + s.token(b, q0) * s.ld_qkv + head;
    T* dq = dqkv + s.token(b, q0) * s.ld_qkv + head;
    const T* dy = dout + s.token(b, q0) * s.ld_out + head;
    const T* y = out + s.token(b, q0) * s.ld_out + head;
    const T* l = l_head + q0;
    transpose_block(qt, q, nq, s.D, s.ld_qkv);
    transpose_block(dyt, dy, nq, s.D, s.ld_out);
    for (int i = 0; i < nq; ++i) {
      const T* dyr = dy + static_cast<size_t>(i) * s.ld_out;
      const T* yr = y + static_cast<size_t>(i) * s.ld_out;
      T acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int d = 0; d < s.D; ++d) acc += dyr[d] * yr[d];
      delta[i] = acc;
    }
    for (int k0 = 0; k0 < q_end; k0 += kBlockK) {
      const int nk = std::min(kBlockK, q_end - k0);
      const T* k = qkv + s.token(b, k0) * s.ld_qkv + s.C + head;
      const T* v = k + s.C;
      T* dk = dqkv + s.token(b, k0) * s.ld_qkv + s.C + head;
      T* dv = dk + s.C;
      // Pᵀ = exp(scale K Qᵀ - lse), zero where the key is in a query's future.
      gemm<T>(Transpose::No, Transpose::No, nk, nq, s.D, scale, k, s.ld_qkv, qt, kBlockQ, T(0), pt, kBlockQ);
      for (int j = 0; j < nk; ++j) {
        T* pr = pt + j * kBlockQ;
        const int first = first_query(q0, k0, j, nq);
        for (int i = 0; i < first; ++i) pr[i] = 0;
#pragma omp simd
        for (int i = first; i < nq; ++i) pr[i] = detail::vexp<T>(pr[i] - l[i]);
      }
      // dV += Pᵀ dO;  dPᵀ = V dOᵀ;  dSᵀ = Pᵀ ∘ (dPᵀ - delta) · scale.
      gemm<T>(Transpose::No, Transpose::No, nk, s.D, nq, T(1), pt, kBlockQ, dy, s.ld_out, T(1), dv, s.ld_qkv);
      gemm<T>(Transpose::No, Transpose::No, nk, nq, s.D, T(1), v, s.ld_qkv, dyt, kBlockQ, T(0), dst, kBlockQ);
      for (int j = 0; j < nk; ++j) {
        const T* pr = pt + j * kBlockQ;
        T* dr = dst + j * kBlockQ;
#pragma omp simd
        for (int i = 0; i < nq; ++i) dr[i] = pr[i] * (dr[i] - delta[i]) * scale;
      }
      // dQ += dS K = (dSᵀ)ᵀ K;  dK += dSᵀ Q.
      gemm<T>(Transpose::Yes, Transpose::No, nq, s.D, nk, T(1), dst, kBlockQ, k, s.ld_qkv, T(1), dq, s.ld_qkv);
      gemm<T>(Transpose::No, Transpose::No, nk, s.D, nq, T(1), dst, kBlockQ, q, s.ld_qkv, T(1), dk, s.ld_qkv);
    }
  }
}

}  // namespace

template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int Tn, int C, int H) {
  const Shape s = make_shape(B, Tn, C, H, "attention_forward");
  const T scale = T(1) / std::sqrt(static_cast<T>(s.D));
  const long items = static_cast<long>(B) * H * s.blocks;
  // Later query blocks see more keys: hand them out first, dynamically, so the cheap early
  // blocks fill the gaps at the end.
#pragma omp parallel for schedule(dynamic, 1)
  for (long item = 0; item < items; ++item) {
    const int qb = s.blocks - 1 - static_cast<int>(item / (static_cast<long>(B) * H));
    const int bh = static_cast<int>(item % (static_cast<long>(B) * H));
    forward_query_block(out, lse, qkv, s, bh / H, bh % H, qb, scale);
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int Tn, int C, int H) {
  const Shape s = make_shape(B, Tn, C, H, "attention_backward");
  const T scale = T(1) / std::sqrt(static_cast<T>(s.D));
  const int items = B * H;
  // Every (b, h) has the same amount of work.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < items; ++bh) backward_head(dqkv, dout, qkv, out, lse, s, bh / H, bh % H, scale);
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, const double*, const double*, const double*, const double*, int, int,
                                         int, int);

}  // namespace tessera::kernels
