#pragma once
// Threading helpers shared by the CPU kernels.
#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace tessera::kernels::detail {

// Below this many elements of work, waking the OpenMP team costs more than it saves.
inline constexpr size_t kParallelMinWork = 16384;

inline bool worth_parallel(size_t work) { return work >= kParallelMinWork && omp_get_max_threads() > 1; }

// Elementwise kernels work on fixed blocks of this many elements (a multiple of every vector
// width), whatever the number of threads. A vectorized loop computes its body and its remainder
// with different instructions (FMA contraction differs), so thread-dependent chunk boundaries
// would change the last bits of the elements near them.
inline constexpr size_t kElementBlock = 4096;

// Calls fn(lo, hi) on the blocks [lo, hi) of [0, n), in parallel when the work is worth it.
// `cost` weighs an element against a plain load-add-store.
template <class Fn>
void for_element_blocks(size_t n, size_t cost, Fn&& fn) {
  const size_t blocks = (n + kElementBlock - 1) / kElementBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(n * cost))
  for (size_t b = 0; b < blocks; ++b) fn(b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
}

// Calls fn(c0, c1) on disjoint column ranges covering [0, C), one per thread. A column is owned by
// exactly one thread, so reductions over rows into a per-column parameter gradient need no
// partial buffers, and every column is summed in row order: the bits do not depend on the number
// of threads.
template <class Fn>
void for_column_ranges(int C, size_t work, Fn&& fn) {
#pragma omp parallel if (worth_parallel(work))
  {
    // The team may be smaller than asked for (nested regions, thread limits): split by its size.
    const int threads = omp_get_num_threads();
    // Ranges are multiples of 16 columns so that threads do not share cache lines.
    const int width = ((C + threads - 1) / threads + 15) / 16 * 16;
    const int c0 = omp_get_thread_num() * width;
    const int c1 = std::min(C, c0 + width);
    if (c0 < c1) fn(c0, c1);
  }
}

}  // namespace tessera::kernels::detail
