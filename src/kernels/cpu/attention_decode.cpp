// Incremental attention (decoding with a key/value cache). Each new token's query needs one pass
// over the keys and values of the positions before it; with one token at a time that is a
// matrix-vector product, so there is nothing for BLAS to gain and the kernel is plain loops:
// per (batch, head, query) item an online softmax over tiles of kTile keys, with the scores of a
// tile on the stack and the output accumulated in place. Items write disjoint rows of `out`, so
// the OpenMP loop over them needs no synchronization, and each item's arithmetic is the same
// whatever the number of threads.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {

constexpr int kTile = 128;
// One token of one sequence against a context of a few hundred positions is some tens of
// microseconds of work: less than waking the OpenMP team and, on a busy machine, far less than
// waiting at the region's end for a descheduled thread. Larger batches and contexts go parallel.
constexpr size_t kParallelWork = size_t{1} << 18;
constexpr int kMaxHeadDim = 256;  // the tiled attention's cap, so every model that trains also decodes

// out_row[D] = softmax(scale · q · K[0..L)ᵀ) V[0..L) for one head; K and V rows are `ld` apart.
template <class T>
void attend_one(T* out_row, const T* q, const T* k, const T* v, int L, int D, size_t ld, T scale) {
  T scores[kTile];
  T acc[kMaxHeadDim];
  std::fill(acc, acc + D, T(0));
  T row_max = -std::numeric_limits<T>::infinity(), row_sum = 0;
  for (int j0 = 0; j0 < L; j0 += kTile) {
    const int n = std::min(kTile, L - j0);
    T tile_max = row_max;
    for (int j = 0; j < n; ++j) {
      const T* kr = k + static_cast<size_t>(j0 + j) * ld;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int d = 0; d < D; ++d) s += q[d] * kr[d];
      scores[j] = s * scale;
      tile_max = scores[j] > tile_max ? scores[j] : tile_max;
    }
    // The first tile holds key 0, so the maximum is finite from then on; exp(-inf) = 0 makes the
    // first rescale harmless.
    const T alpha = detail::vexp<T>(row_max - tile_max);
    row_sum *= alpha;
    if (alpha != T(1)) {
#pragma omp simd
      for (int d = 0; d < D; ++d) acc[d] *= alpha;
    }
#pragma omp simd
    for (int j = 0; j < n; ++j) scores[j] = detail::vexp<T>(scores[j] - tile_max);
    for (int j = 0; j < n; ++j) {
      const T p = scores[j];
      row_sum += p;
      const T* vr = v + static_cast<size_t>(j0 + j) * ld;
#pragma omp simd
      for (int d = 0; d < D; ++d) acc[d] += p * vr[d];
    }
    row_max = tile_max;
  }
  const T inv = T(1) / row_sum;
#pragma omp simd
  for (int d = 0; d < D; ++d) out_row[d] = acc[d] * inv;
}

// The float or double decode of a call its caller has checked.
template <class T>
void decode(T* out, T* k_cache, T* v_cache, const T* qkv, const QkvHeads& heads, int B, int Tn, int past, int S,
            int C) {
  const int H = heads.H, D = heads.D;
  const size_t row = static_cast<size_t>(heads.row()), c = static_cast<size_t>(C);
  const size_t ckv = static_cast<size_t>(heads.Hkv) * D;  // a cache row: the key/value heads only
  // Keys and values first: new token i attends to the new tokens before it.
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < Tn; ++i) {
      const T* r = qkv + (static_cast<size_t>(b) * Tn + i) * row;
      const size_t at = (static_cast<size_t>(b) * S + past + i) * ckv;
      std::memcpy(k_cache + at, r + heads.key(0), ckv * sizeof(T));
      std::memcpy(v_cache + at, r + heads.value(0), ckv * sizeof(T));
    }
  }
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const long items = static_cast<long>(B) * H * Tn;
  const size_t work = static_cast<size_t>(items) * (static_cast<size_t>(past) + Tn) * 2 * D;
#pragma omp parallel for schedule(dynamic, 1) if (work >= kParallelWork && detail::worth_parallel(work))
  for (long item = 0; item < items; ++item) {
    const int i = static_cast<int>(item % Tn);
    const int h = static_cast<int>(item / Tn % H);
    const int b = static_cast<int>(item / (static_cast<long>(Tn) * H));
    const size_t kv = static_cast<size_t>(heads.key(h) - heads.key(0));  // the key/value head's offset in a cache row
    const size_t seq = static_cast<size_t>(b) * S * ckv;
    attend_one(out + (static_cast<size_t>(b) * Tn + i) * c + heads.query(h),
               qkv + (static_cast<size_t>(b) * Tn + i) * row + heads.query(h), k_cache + seq + kv, v_cache + seq + kv,
               past + i + 1, D, ckv, scale);
  }
}

}  // namespace

template <class T>
void attention_decode(T* out, T* k_cache, T* v_cache, const T* qkv, int B, int Tn, int past, int S, int C, int H,
                      int Hkv) {
  const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, "attention_decode");
  TS_CHECK(past >= 0 && S >= 0 && static_cast<int64_t>(past) + Tn <= S,
           "attention_decode: {} cached and {} new positions do not fit a cache of {} positions", past, Tn, S);
  TS_CHECK(heads.D <= kMaxHeadDim, "attention_decode: head dimension D = C/H = {} is above the supported maximum of {}",
           heads.D, kMaxHeadDim);
  if constexpr (is_half_v<T>) {
    // The float decode on f32 copies of qkv and of the positions it reads, caches of L = past + Tn
    // positions; its output and the new keys and values (exact: widened 16-bit values) are
    // narrowed back.
    const int L = past + Tn;
    const size_t ckv = static_cast<size_t>(Hkv) * heads.D;
    const size_t tokens = static_cast<size_t>(B) * Tn;
    std::vector<float> k(static_cast<size_t>(B) * L * ckv), v(k.size());
    for (int b = 0; b < B; ++b) {
      const size_t from = static_cast<size_t>(b) * S * ckv, to = static_cast<size_t>(b) * L * ckv;
      widen<T>(k.data() + to, k_cache + from, static_cast<size_t>(past) * ckv);
      widen<T>(v.data() + to, v_cache + from, static_cast<size_t>(past) * ckv);
    }
    const std::vector<float> wide_qkv = widened(qkv, tokens * heads.row());
    std::vector<float> wide_out(tokens * C);
    decode<float>(wide_out.data(), k.data(), v.data(), wide_qkv.data(), heads, B, Tn, past, L, C);
    narrow<T>(out, wide_out.data(), wide_out.size());
    for (int b = 0; b < B; ++b) {
      const size_t from = (static_cast<size_t>(b) * L + past) * ckv, to = (static_cast<size_t>(b) * S + past) * ckv;
      narrow<T>(k_cache + to, k.data() + from, static_cast<size_t>(Tn) * ckv);
      narrow<T>(v_cache + to, v.data() + from, static_cast<size_t>(Tn) * ckv);
    }
  } else {
    decode<T>(out, k_cache, v_cache, qkv, heads, B, Tn, past, S, C);
  }
}

template void attention_decode<float>(float*, float*, float*, const float*, int, int, int, int, int, int, int);
template void attention_decode<double>(double*, double*, double*, const double*, int, int, int, int, int, int, int);
template void attention_decode<bf16>(bf16*, bf16*, bf16*, const bf16*, int, int, int, int, int, int, int);
template void attention_decode<f16>(f16*, f16*, f16*, const f16*, int, int, int, int, int, int, int);

}  // namespace tessera::kernels
