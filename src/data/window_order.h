#pragma once
// The order in which an epoch visits the windows of a token file: a keyed pseudo-random
// permutation of [0, n). It is a function, not a table: the position of any sequence is computed
// from (seed, epoch, index) alone in O(1) time and memory, so every data-parallel rank, resumed
// run or microbatch finds its windows without the others and without a shuffled index array.
//
// Construction: a balanced Feistel network over the smallest even number of bits covering n
// (its round function is Philox keyed by seed, epoch and round, core/rng.h), which permutes
// [0, 2^bits); values >= n are mapped again until they land in [0, n) ("cycle walking"). Since
// 2^bits < 4n, that takes fewer than 4 steps on average, and it always ends because the walk
// follows a cycle of a permutation that contains the start value.
#include <cstdint>

namespace tessera::data {

class WindowOrder {
 public:
  WindowOrder(uint64_t n, uint64_t seed, uint64_t epoch);
  // The window visited at position `index` (< n) of the epoch.
  uint64_t operator()(uint64_t index) const;

 private:
  uint64_t feistel(uint64_t x) const;

  uint64_t n_;
  uint64_t seed_;
  uint64_t epoch_;
  int half_bits_;
  uint64_t half_mask_;
};

}  // namespace tessera::data
