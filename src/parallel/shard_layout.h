#pragma once
// How ZeRO splits the flat parameter/gradient buffer over the N ranks of a data-parallel group.
//
// The layout covers a domain of one or more pieces: contiguous ranges of the flat buffer. Without
// pipelining the domain is the whole buffer, one piece of Ψ elements. A pipeline rank's domain is
// the parameters its stages read (parallel/pipeline_stages.h): a piece per run of them, and a piece
// of its own for a parameter two stages share (a tied embedding), so both holders split it alike.
//
// Each piece [a, b) of n elements is split evenly: rank r owns [a + ⌊rn/N⌋, a + ⌊(r+1)n/N⌋). No
// padding: parts are ⌊n/N⌋ or ⌈n/N⌉ elements and the communicator's uneven-count collectives move
// exactly those, so every per-rank byte count of ZeRO is exact up to one element per piece. A
// rank's shard is its parts of every piece, packed in flat order.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/unit.h"

namespace tessera::parallel {

class ShardLayout {
 public:
  // One piece: [0, numel).
  ShardLayout(int64_t numel, int ranks);
  // Pieces in flat order, disjoint and non-empty.
  ShardLayout(std::vector<nn::ParamRange> pieces, int ranks);

  int64_t numel() const { return numel_; }  // of every piece together
  int ranks() const { return ranks_; }
  const std::vector<nn::ParamRange>& pieces() const { return pieces_; }
  // This rank's part of every piece, in flat order (empty parts left out).
  std::vector<nn::ParamRange> shards(int rank) const;
  int64_t shard_size(int rank) const;
  // A one-piece layout's shard of `rank` (ZeRO-3 gathers from one contiguous shard).
  nn::ParamRange shard(int rank) const;
  // Where flat element `at` of this rank's shard sits in the packed shard.
  int64_t shard_offset(int rank, int64_t at) const;
  // For each rank, how many elements of `range` (inside one piece) fall in its part: the chunk
  // counts of a reduce-scatter or all-gather over `range` (rank i's chunk starts where i-1's ends).
  std::vector<size_t> counts(nn::ParamRange range) const;
  // The part of `range` (inside one piece) that `rank` owns (empty ranges have begin == end).
  nn::ParamRange part(nn::ParamRange range, int rank) const;
  int64_t largest_shard() const;

 private:
  const nn::ParamRange& piece_of(nn::ParamRange range) const;
  nn::ParamRange part_of_piece(const nn::ParamRange& piece, int rank) const;

  std::vector<nn::ParamRange> pieces_;
  int64_t numel_ = 0;
  int ranks_;
};

nn::ParamRange intersect(nn::ParamRange a, nn::ParamRange b);

}  // namespace tessera::parallel
