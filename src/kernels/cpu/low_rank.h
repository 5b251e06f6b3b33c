#pragma once
// The products of PowerSGD's power iteration (parallel/compression/power_sgd.cpp) on one
// gradient matrix M [rows, cols], row-major, with r = `rank` columns in P [rows, r] and Q:
//   P = M Q,  Q = Mᵀ P,  and M ≈ P Qᵀ with the error M − P Qᵀ / R kept for the next step.
// Every output element is one sum in a fixed order (over the columns of M for P, over its rows for
// Q, over the r columns for the approximation), the same whatever the rank or the thread count, so
// every rank of a group computes the same bits. The sums run in registers per row of M: the
// outputs a row updates (r of P, or r of each Q row) stay in a small local array the compiler can
// keep there, where updating them in memory reloaded each one per element of M.
#include <cstdint>

namespace tessera::kernels {

// P [rows, rank] = M Q, where Q's row j holds `rank` values at q + j · q_stride (a prefix of a
// wider matrix when q_stride > rank).
void low_rank_project(const float* m, int64_t rows, int64_t cols, const float* q, int64_t q_stride, int64_t rank,
                      float* p);
// Q [cols, rank] = Mᵀ P.
void low_rank_project_transposed(const float* m, int64_t rows, int64_t cols, const float* p, int64_t rank, float* q);
// approx = P Qᵀ; error = M − approx / group_size; then M = approx (M and error are [rows, cols]).
void low_rank_reconstruct(float* m, float* error, int64_t rows, int64_t cols, const float* p, const float* q,
                          int64_t rank, float group_size);

}  // namespace tessera::kernels
