// Tiled causal attention (FlashAttention-2 on the CPU). For each (batch, head), queries are cut
// into blocks of kBlockQ and keys into tiles of kBlockK. Forward: per query block, an online
// softmax runs over the key tiles up to the diagonal with two GEMMs per tile; only the log-sum-exp
// of each query row is saved. Backward: per (batch, head) and query block, the scores against all
// the keys the block sees are recomputed in one GEMM into per-thread scratch (keys × 64 queries),
// the softmax is redone from them as a materialized one would be (see backward_head for why not
// from the saved log-sum-exp), and four more GEMMs give dV, dP, dQ and dK.
//
// Layout: tiles are held transposed, keys × queries (Sᵀ = K Qᵀ), with Qᵀ (and dOᵀ) copied once
// per query block. Every GEMM is then NN or TN, which OpenBLAS runs with its small-matrix kernels
// about a third faster than the NT products of the textbook layout, and the softmax runs along
// rows of queries: per-query maxima and sums are plain vector operations, with no horizontal
// reduction per row.
//
// Grouped-query attention changes only where a query head finds its keys and values
// (QkvHeads): the forward reads them, the backward accumulates into them, once per query head of
// the group, in head order.
//
// Threading: the forward runs an OpenMP loop over (batch, query head, query block) items, the
// backward over (batch, key/value head) items, and every item calls BLAS on its own tiles. The OpenMP build of
// OpenBLAS asks omp_in_parallel() before threading a call and runs it on the calling thread alone
// inside an active parallel region (checked by interposing omp_in_parallel: true for every tile
// call, and no BLAS worker threads start), so the cores are shared out once, by our loop, and
// never oversubscribed. Each item writes only its own rows of out and lse, or its own group's
// slices of dqkv (the group's query heads and their key/value head), so items need no
// synchronization, and the sums do not depend on the thread count.

#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

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
// The backward sums a query's exponentials in float over chunks of this many keys, the chunks in
// double. Σ_j P dP and Σ_j P run in double throughout: with values that share a large component,
// P dP cancels, and float partial sums even over 16 keys lose what dQ needs.
constexpr int kSumChunk = 16;

struct Shape {
  int B, Tn, C, H, D;
  QkvHeads heads;
  int ld_qkv;  // W3: distance between tokens in qkv and dqkv
  int ld_out;  // C: distance between tokens in out and dout
  int blocks;  // query blocks per sequence

  size_t token(int b, int t) const { return static_cast<size_t>(b) * Tn + t; }
};

Shape make_shape(int B, int Tn, int C, int H, int Hkv, const char* name) {
  const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, name);
  TS_CHECK(heads.D <= kMaxHeadDim, "{}: head dimension D = C/H = {} is above the supported maximum of {}", name,
           heads.D, kMaxHeadDim);
  return Shape{B, Tn, C, H, heads.D, heads, heads.row(), C, (Tn + kBlockQ - 1) / kBlockQ};
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
  T row_max[kBlockQ], tile_max[kBlockQ], tile_sum[kBlockQ], alpha[kBlockQ];
  // A tile's sum of exponentials (up to 128 keys) in float, the row's over tiles in double: one
  // float sum over all keys of a long row would carry a relative error of many ulps into every
  // output of the row.
  double row_sum[kBlockQ];
  transpose_block(qt, qkv + s.token(b, q0) * s.ld_qkv + head, nq, s.D, s.ld_qkv);
  std::fill(row_max, row_max + kBlockQ, -std::numeric_limits<T>::infinity());
  std::fill(row_sum, row_sum + kBlockQ, 0.0);

  for (int k0 = 0; k0 < q_end; k0 += kBlockK) {
    const int nk = std::min(kBlockK, q_end - k0);  // no key past the block's last query
    const T* k = qkv + s.token(b, k0) * s.ld_qkv + s.heads.key(h);
    const T* v = qkv + s.token(b, k0) * s.ld_qkv + s.heads.value(h);
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
      row_sum[i] = row_sum[i] * static_cast<double>(alpha[i]) + static_cast<double>(tile_sum[i]);
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
    const T inv = static_cast<T>(1.0 / row_sum[i]);
    T* orow = o + static_cast<size_t>(i) * s.ld_out;
#pragma omp simd
    for (int d = 0; d < s.D; ++d) orow[d] *= inv;
    l[i] = static_cast<T>(static_cast<double>(row_max[i]) + std::log(row_sum[i]));
  }
}

// All query blocks of one (b, h), accumulated into dQ of h and dK, dV of its key/value head,
// which the caller has zeroed: the item owns them, so they accumulate in place with no partial
// buffers. Per query block, the scores against every key the
// block sees are recomputed into the item's scratch and the softmax is redone from them as a
// materialized one would be: row maxima, exponentials, sums, normalization; then
// delta = Σ_j P dP / Σ_j P from those very probabilities, so that every row of dS = P (dP - delta)
// sums to zero up to the rounding of its terms. That zero matters: dQ = dS K multiplies a row's
// sum by the component all keys share, which in a trained model can be many times larger than
// what tells them apart. Hence also the sums in double (kSumChunk): a float sum of a row's
// exponentials, one key after another, is off by several ulps, and P dP cancels where the values
// share a large component. Two earlier shortcuts broke the
// zero, and grew with the scores: probabilities recomputed as exp(S - lse) from the forward's float
// log-sum-exp (its rounding, |lse| 2^-24, a relative error of every probability of the row, where
// a materialized softmax has 1 ulp on the peak), and delta = rowsum(dO ∘ O) from the forward's
// rounded output. In an ill-conditioned state (large scores, saturated attention) they put the
// gradients of the attention weights many times further from float64 than PyTorch's float32.
// Same five GEMMs as a tiled backward, one per operand for all keys at once.
template <class T>
void backward_head(T* dqkv, const T* dout, const T* qkv, const Shape& s, int b, int h, T scale, T* pt, T* dst) {
  const size_t head = static_cast<size_t>(h) * s.D;
  T qt[kMaxHeadDim * kBlockQ];   // Qᵀ
  T dyt[kMaxHeadDim * kBlockQ];  // dOᵀ
  T row_max[kBlockQ], inv_sum[kBlockQ];
  T delta[kBlockQ];  // Σ_j P dP / Σ_j P, the softmax backward's correction
  // Sums over keys in double (see the comment above the function).
  double row_sum[kBlockQ], p_dp[kBlockQ], p_sum[kBlockQ];
  const size_t row0 = s.token(b, 0) * s.ld_qkv;
  const T* k = qkv + row0 + s.heads.key(h);
  const T* v = qkv + row0 + s.heads.value(h);
  T* dk = dqkv + row0 + s.heads.key(h);
  T* dv = dqkv + row0 + s.heads.value(h);

  for (int qb = 0; qb < s.blocks; ++qb) {
    const int q0 = qb * kBlockQ;
    const int nq = std::min(kBlockQ, s.Tn - q0);
    const int q_end = q0 + nq;  // keys 0 .. q_end - 1 are visible to some query of the block
    const T* q = qkv + s.token(b, q0) * s.ld_qkv + head;
    T* dq = dqkv + s.token(b, q0) * s.ld_qkv + head;
    const T* dy = dout + s.token(b, q0) * s.ld_out + head;
    transpose_block(qt, q, nq, s.D, s.ld_qkv);
    transpose_block(dyt, dy, nq, s.D, s.ld_out);

    // Sᵀ = scale K Qᵀ [q_end, nq]; key j is visible to the queries i >= first_query(q0, 0, j, nq).
    gemm<T>(Transpose::No, Transpose::No, q_end, nq, s.D, scale, k, s.ld_qkv, qt, kBlockQ, T(0), pt, kBlockQ);
    std::fill(row_max, row_max + kBlockQ, -std::numeric_limits<T>::infinity());
    for (int j = 0; j < q_end; ++j) {
      const T* sr = pt + static_cast<size_t>(j) * kBlockQ;
#pragma omp simd
      for (int i = first_query(q0, 0, j, nq); i < nq; ++i) row_max[i] = sr[i] > row_max[i] ? sr[i] : row_max[i];
    }
    // Pᵀ = exp(S - max), zero in a query's future; summed per query (kSumChunk keys in float).
    std::fill(row_sum, row_sum + kBlockQ, 0.0);
    for (int j0 = 0; j0 < q_end; j0 += kSumChunk) {
      T part[kBlockQ] = {};
      for (int j = j0; j < std::min(q_end, j0 + kSumChunk); ++j) {
        T* pr = pt + static_cast<size_t>(j) * kBlockQ;
        const int first = first_query(q0, 0, j, nq);
        for (int i = 0; i < first; ++i) pr[i] = 0;
#pragma omp simd
        for (int i = first; i < nq; ++i) {
          pr[i] = detail::vexp<T>(pr[i] - row_max[i]);
          part[i] += pr[i];
        }
      }
#pragma omp simd
      for (int i = 0; i < nq; ++i) row_sum[i] += static_cast<double>(part[i]);
    }
    // Every query sees at least key q0 + i itself, whose term is exp(0) = 1: sums are >= 1.
    for (int i = 0; i < nq; ++i) inv_sum[i] = static_cast<T>(1.0 / row_sum[i]);
    // dPᵀ = V dOᵀ; then P normalized in place and delta = Σ_j P dP / Σ_j P.
    gemm<T>(Transpose::No, Transpose::No, q_end, nq, s.D, T(1), v, s.ld_qkv, dyt, kBlockQ, T(0), dst, kBlockQ);
    std::fill(p_dp, p_dp + kBlockQ, 0.0);
    std::fill(p_sum, p_sum + kBlockQ, 0.0);
    for (int j = 0; j < q_end; ++j) {
      T* pr = pt + static_cast<size_t>(j) * kBlockQ;
      const T* dr = dst + static_cast<size_t>(j) * kBlockQ;
#pragma omp simd
      for (int i = first_query(q0, 0, j, nq); i < nq; ++i) {
        pr[i] *= inv_sum[i];
        p_dp[i] += static_cast<double>(pr[i]) * static_cast<double>(dr[i]);
        p_sum[i] += static_cast<double>(pr[i]);
      }
    }
    for (int i = 0; i < nq; ++i) delta[i] = static_cast<T>(p_dp[i] / p_sum[i]);
    // dV += Pᵀ dO;  dSᵀ = Pᵀ ∘ (dPᵀ - delta) · scale, zero where P is.
    gemm<T>(Transpose::No, Transpose::No, q_end, s.D, nq, T(1), pt, kBlockQ, dy, s.ld_out, T(1), dv, s.ld_qkv);
    for (int j = 0; j < q_end; ++j) {
      const T* pr = pt + static_cast<size_t>(j) * kBlockQ;
      T* dr = dst + static_cast<size_t>(j) * kBlockQ;
#pragma omp simd
      for (int i = 0; i < nq; ++i) dr[i] = pr[i] * (dr[i] - delta[i]) * scale;
    }
    // dQ += dS K = (dSᵀ)ᵀ K;  dK += dSᵀ Q.
    gemm<T>(Transpose::Yes, Transpose::No, nq, s.D, q_end, T(1), dst, kBlockQ, k, s.ld_qkv, T(1), dq, s.ld_qkv);
    gemm<T>(Transpose::No, Transpose::No, q_end, s.D, nq, T(1), dst, kBlockQ, q, s.ld_qkv, T(1), dk, s.ld_qkv);
  }
}

// One key/value head of one sequence: zeroes the group's slices of dqkv, then accumulates each of
// its query heads in turn.
template <class T>
void backward_group(T* dqkv, const T* dout, const T* qkv, const Shape& s, int b, int kv, T scale, T* pt, T* dst) {
  const int group = s.heads.group(), first = kv * group;
  for (int t = 0; t < s.Tn; ++t) {
    T* d = dqkv + s.token(b, t) * s.ld_qkv;
    std::fill(d + s.heads.query(first), d + s.heads.query(first) + group * s.D, T(0));
    std::fill(d + s.heads.key(first), d + s.heads.key(first) + s.D, T(0));
    std::fill(d + s.heads.value(first), d + s.heads.value(first) + s.D, T(0));
  }
  for (int h = first; h < first + group; ++h) backward_head(dqkv, dout, qkv, s, b, h, scale, pt, dst);
}

// The whole forward (backward) of a float or double call, its shape checked.
template <class T>
void tiled_forward(T* out, T* lse, const T* qkv, const Shape& s) {
  const T scale = T(1) / std::sqrt(static_cast<T>(s.D));
  const long items = static_cast<long>(s.B) * s.H * s.blocks;
  // Later query blocks see more keys: hand them out first, dynamically, so the cheap early
  // blocks fill the gaps at the end.
#pragma omp parallel for schedule(dynamic, 1)
  for (long item = 0; item < items; ++item) {
    const int qb = s.blocks - 1 - static_cast<int>(item / (static_cast<long>(s.B) * s.H));
    const int bh = static_cast<int>(item % (static_cast<long>(s.B) * s.H));
    forward_query_block(out, lse, qkv, s, bh / s.H, bh % s.H, qb, scale);
  }
}

template <class T>
void tiled_backward(T* dqkv, const T* dout, const T* qkv, const Shape& s) {
  const T scale = T(1) / std::sqrt(static_cast<T>(s.D));
  // Fewer items than query heads under grouped-query attention: the group's heads share dK and dV.
  const int Hkv = s.heads.Hkv;
  const int items = s.B * Hkv;
  // Per thread: Pᵀ and dPᵀ of one query block against all the keys it sees.
  const size_t scratch = static_cast<size_t>(s.Tn) * kBlockQ;
  // Every (b, kv) has the same amount of work.
#pragma omp parallel
  {
    std::vector<T> pt(scratch), dst(scratch);
#pragma omp for schedule(static)
    for (int item = 0; item < items; ++item) {
      backward_group(dqkv, dout, qkv, s, item / Hkv, item % Hkv, scale, pt.data(), dst.data());
    }
  }
}

}  // namespace

QkvHeads qkv_heads(int B, int Tn, int C, int H, int Hkv, const char* kernel) {
  TS_CHECK(B >= 0 && Tn >= 0 && H > 0 && C > 0 && C % H == 0,
           "{}: C={} must be a positive multiple of the number of heads H={} (B={}, T={})", kernel, C, H, B, Tn);
  TS_CHECK(Hkv > 0 && H % Hkv == 0, "{}: the {} key/value heads must be a positive divisor of the {} query heads", kernel,
           Hkv, H);
  return QkvHeads{H, Hkv, C / H};
}

namespace {
// The f32 copies of the 16-bit calls, kept per thread from call to call (kernels/cpu/element.h).
struct WideScratch {
  std::vector<float> qkv, out, dout, dqkv;
};
WideScratch& wide_scratch() {
  static thread_local WideScratch scratch;
  return scratch;
}
}  // namespace

template <class T>
void attention_forward(T* out, compute_t<T>* lse, const T* qkv, int B, int Tn, int C, int H, int Hkv) {
  const Shape s = make_shape(B, Tn, C, H, Hkv, "attention_forward");
  if constexpr (is_half_v<T>) {
    // The float kernel on a widened copy of qkv, its output rounded to T once; lse is f32 already.
    const size_t tokens = static_cast<size_t>(B) * Tn;
    WideScratch& scratch = wide_scratch();
    float* wide_qkv = scratch_of(scratch.qkv, tokens * s.ld_qkv);
    float* wide_out = scratch_of(scratch.out, tokens * s.ld_out);
    widen<T>(wide_qkv, qkv, tokens * s.ld_qkv);
    tiled_forward<float>(wide_out, lse, wide_qkv, s);
    narrow<T>(out, wide_out, tokens * s.ld_out);
  } else {
    tiled_forward<T>(out, lse, qkv, s);
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const compute_t<T>* lse, int B, int Tn,
                        int C, int H, int Hkv) {
  const Shape s = make_shape(B, Tn, C, H, Hkv, "attention_backward");
  // out and lse are not read: the backward redoes the softmax from the scores (see backward_head).
  (void)out;
  (void)lse;
  if constexpr (is_half_v<T>) {
    // The float kernel on widened copies of qkv and dout, dqkv rounded to T once.
    const size_t tokens = static_cast<size_t>(B) * Tn;
    WideScratch& scratch = wide_scratch();
    float* wide_qkv = scratch_of(scratch.qkv, tokens * s.ld_qkv);
    float* wide_dout = scratch_of(scratch.dout, tokens * s.ld_out);
    float* wide_dqkv = scratch_of(scratch.dqkv, tokens * s.ld_qkv);
    widen<T>(wide_qkv, qkv, tokens * s.ld_qkv);
    widen<T>(wide_dout, dout, tokens * s.ld_out);
    tiled_backward<float>(wide_dqkv, wide_dout, wide_qkv, s);
    narrow<T>(dqkv, wide_dqkv, tokens * s.ld_qkv);
  } else {
    tiled_backward<T>(dqkv, dout, qkv, s);
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, int);
template void attention_forward<bf16>(bf16*, float*, const bf16*, int, int, int, int, int);
template void attention_forward<f16>(f16*, float*, const f16*, int, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*, int, int, int,
                                        int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, const double*, int, int,
                                         int, int, int);
template void attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*, int, int, int, int,
                                       int);
template void attention_backward<f16>(f16*, const f16*, const f16*, const f16*, const float*, int, int, int, int, int);

}  // namespace tessera::kernels
