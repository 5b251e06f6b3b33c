#pragma once
// Causal multi-head self-attention on a packed qkv, scores scaled by 1/sqrt(D). Per token the qkv
// row holds q [C], k [Ckv], v [Ckv]: C = H·D split into H query heads, Ckv = Hkv·D into Hkv
// key/value heads. Hkv = H is multi-head attention (GPT-2's c_attn output); Hkv < H, a divisor
// of H, is grouped-query attention (Llama-2-70B, Llama-3): query head h reads key/value head
// h / (H/Hkv), so consecutive query heads share one.
// Shapes: B batch, T time (Tn in code), C query channels, H query heads, Hkv key/value heads,
// D = C/H, W3 = C + 2·Ckv the qkv row.
// 16-bit T (bf16, f16): every kernel here runs its float algorithm on f32 copies of its 16-bit
// inputs (heap scratch per call, the size of the tensors it reads and writes) and rounds its 16-bit
// outputs once; the log-sum-exp is compute_t<T> (f32), as kernels/cpu/element.h has statistics.
#include "kernels/cpu/element.h"

namespace tessera::kernels {

// Tiled (flash-style): never materializes the T×T scores. Saves lse[B,H,T], the log-sum-exp of
// the scaled scores of each query row. The backward recomputes the probabilities of 64 queries at
// a time against all the keys they see, and redoes their softmax exactly (it reads neither out nor
// lse, which stay in its signature for callers). The tiles are multiplied with BLAS. Needs
// D <= 256; uses up to 200 KB (float) or 400 KB (double) of stack per thread for its tiles, and
// the backward 2 × T × 64 elements of heap scratch per thread (512 KB in float at T = 1024).
template <class T>
void attention_forward(T* out /*[B,T,C]*/, compute_t<T>* lse /*[B,H,T]*/, const T* qkv /*[B,T,W3]*/, int B, int Tn,
                       int C, int H, int Hkv);

// dqkv[B,T,W3] written, from dout[B,T,C] and the forward's qkv, out and lse.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const compute_t<T>* lse, int B, int Tn,
                        int C, int H, int Hkv);

// Incremental attention for decoding, forward only (generation never trains). The Tn new tokens
// of qkv[B,Tn,W3] sit at positions past .. past+Tn-1 of sequences whose keys and values at the
// positions before `past` are already in k_cache and v_cache [B,S,Ckv] (S >= past + Tn). Writes the
// new tokens' keys and values into the caches at their positions, then
//   out[b,i] = softmax_j(q_i · k_j / sqrt(D)) v_j over j <= past + i,
// which is row past + i of attention_forward over the whole sequence. Each query runs an online
// softmax over tiles of keys, so no scores are stored beyond one tile (stack scratch; D <= 256).
// 16-bit caches are widened at the positions the call reads (0 .. past+Tn-1 of each sequence).
template <class T>
void attention_decode(T* out /*[B,Tn,C]*/, T* k_cache /*[B,S,Ckv]*/, T* v_cache /*[B,S,Ckv]*/,
                      const T* qkv /*[B,Tn,W3]*/, int B, int Tn, int past, int S, int C, int H, int Hkv);

// Naive reference: materializes att[B,H,T,T], the post-softmax probabilities (zeros above the
// diagonal), in T like any activation. For tests and small shapes.
template <class T>
void attention_forward_naive(T* out /*[B,T,C]*/, T* att /*[B,H,T,T]*/, const T* qkv /*[B,T,W3]*/, int B, int Tn, int C,
                             int H, int Hkv);

// dqkv[B,T,W3] written, from dout[B,T,C], qkv and the forward's att.
template <class T>
void attention_backward_naive(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int H, int Hkv);

// Where a head's q, k and v start in a qkv row, for the kernels above and their tests.
struct QkvHeads {
  int H, Hkv, D;
  int group() const { return H / Hkv; }     // query heads per key/value head
  int row() const { return (H + 2 * Hkv) * D; }  // W3
  int query(int h) const { return h * D; }
  int key(int h) const { return (H + h / group()) * D; }         // of query head h's key/value head
  int value(int h) const { return (H + Hkv + h / group()) * D; }
};
// The heads of a qkv row whose queries are C = H·D wide, once `kernel` has checked that H divides C
// and Hkv divides H.
QkvHeads qkv_heads(int B, int Tn, int C, int H, int Hkv, const char* kernel);

}  // namespace tessera::kernels
