#pragma once
// How ZeRO splits the flat parameter/gradient buffer of Ψ elements over the N ranks of a
// data-parallel group: rank r owns the contiguous range [⌊rΨ/N⌋, ⌊(r+1)Ψ/N⌋). No padding: shard
// sizes are ⌊Ψ/N⌋ or ⌈Ψ/N⌉, and the communicator's uneven-count collectives move exactly those.
// So every per-rank byte count of ZeRO is exact up to one element of difference between ranks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/unit.h"

namespace tessera::parallel {

class ShardLayout {
 public:
  ShardLayout(int64_t numel, int ranks);

  int64_t numel() const { return numel_; }
  int ranks() const { return ranks_; }
  nn::ParamRange shard(int rank) const;
  // For each rank, how many elements of `range` fall in its shard: the chunk counts of a
  // reduce-scatter or all-gather over `range` (rank i's chunk starts where rank i-1's ends).
  std::vector<size_t> counts(nn::ParamRange range) const;
  // The part of `range` inside `rank`'s shard (empty ranges have begin == end).
  nn::ParamRange part(nn::ParamRange range, int rank) const;
  int64_t largest_shard() const { return (numel_ + ranks_ - 1) / ranks_; }

 private:
  int64_t numel_;
  int ranks_;
};

nn::ParamRange intersect(nn::ParamRange a, nn::ParamRange b);

}  // namespace tessera::parallel
