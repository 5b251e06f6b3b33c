#pragma once
// Causal multi-head self-attention on a packed qkv (per token: q[C] k[C] v[C], each C split into H
// heads of D values, as the c_attn output of GPT-2), scores scaled by 1/sqrt(D).
// Shapes: B batch, T time (Tn in code), C channels, H heads, D = C/H.
namespace tessera::kernels {

// Tiled (flash-style): never materializes the T×T scores. Saves lse[B,H,T], the log-sum-exp of
// the scaled scores of each query row. The backward recomputes the probabilities of 64 queries at
// a time against all the keys they see, and redoes their softmax exactly (it reads neither out nor
// lse, which stay in its signature for callers). The tiles are multiplied with BLAS. Needs
// D <= 256; uses up to 200 KB (float) or 400 KB (double) of stack per thread for its tiles, and
// the backward 2 × T × 64 elements of heap scratch per thread (512 KB in float at T = 1024).
template <class T>
void attention_forward(T* out /*[B,T,C]*/, T* lse /*[B,H,T]*/, const T* qkv /*[B,T,3C]*/, int B, int Tn, int C, int H);

// dqkv[B,T,3C] written, from dout[B,T,C] and the forward's qkv, out and lse.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int Tn, int C, int H);

// Incremental attention for decoding, forward only (generation never trains). The Tn new tokens
// of qkv[B,Tn,3C] sit at positions past .. past+Tn-1 of sequences whose keys and values at the
// positions before `past` are already in k_cache and v_cache [B,S,C] (S >= past + Tn). Writes the
// new tokens' keys and values into the caches at their positions, then
//   out[b,i] = softmax_j(q_i · k_j / sqrt(D)) v_j over j <= past + i,
// which is row past + i of attention_forward over the whole sequence. Each query runs an online
// softmax over tiles of keys, so no scores are stored beyond one tile (stack scratch; D <= 256).
template <class T>
void attention_decode(T* out /*[B,Tn,C]*/, T* k_cache /*[B,S,C]*/, T* v_cache /*[B,S,C]*/, const T* qkv /*[B,Tn,3C]*/,
                      int B, int Tn, int past, int S, int C, int H);

// Naive reference: materializes att[B,H,T,T], the post-softmax probabilities (zeros above the
// diagonal). For tests and small shapes.
template <class T>
void attention_forward_naive(T* out /*[B,T,C]*/, T* att /*[B,H,T,T]*/, const T* qkv /*[B,T,3C]*/, int B, int Tn, int C,
                             int H);

// dqkv[B,T,3C] written, from dout[B,T,C], qkv and the forward's att.
template <class T>
void attention_backward_naive(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int H);

}  // namespace tessera::kernels
