#include "parallel/shard_layout.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::parallel {

nn::ParamRange intersect(nn::ParamRange a, nn::ParamRange b) {
  const int64_t lo = std::max(a.begin, b.begin);
  const int64_t hi = std::min(a.end, b.end);
  return hi > lo ? nn::ParamRange{lo, hi} : nn::ParamRange{lo, lo};
}

ShardLayout::ShardLayout(int64_t numel, int ranks)
    : ShardLayout(numel > 0 ? std::vector<nn::ParamRange>{{0, numel}} : std::vector<nn::ParamRange>{}, ranks) {
  TS_CHECK(numel >= 0, "shard layout of {} elements over {} ranks", numel, ranks);
}

ShardLayout::ShardLayout(std::vector<nn::ParamRange> pieces, int ranks) : pieces_(std::move(pieces)), ranks_(ranks) {
  TS_CHECK(ranks >= 1, "shard layout over {} ranks", ranks);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    TS_CHECK(pieces_[i].size() > 0 && pieces_[i].begin >= 0 && (i == 0 || pieces_[i].begin >= pieces_[i - 1].end),
             "shard layout: piece [{}, {}) is empty or not after the one before it", pieces_[i].begin, pieces_[i].end);
    numel_ += pieces_[i].size();
  }
}

nn::ParamRange ShardLayout::part_of_piece(const nn::ParamRange& piece, int rank) const {
  TS_CHECK(rank >= 0 && rank < ranks_, "rank {} outside a group of {}", rank, ranks_);
  const int64_t n = piece.size(), r = rank;
  return {piece.begin + r * n / ranks_, piece.begin + (r + 1) * n / ranks_};
}

std::vector<nn::ParamRange> ShardLayout::shards(int rank) const {
  std::vector<nn::ParamRange> out;
  for (const nn::ParamRange& piece : pieces_) {
    const nn::ParamRange part = part_of_piece(piece, rank);
    if (part.size() > 0) out.push_back(part);
  }
  return out;
}

int64_t ShardLayout::shard_size(int rank) const {
  int64_t n = 0;
  for (const nn::ParamRange& piece : pieces_) n += part_of_piece(piece, rank).size();
  return n;
}

nn::ParamRange ShardLayout::shard(int rank) const {
  TS_CHECK(pieces_.size() <= 1, "a layout of {} pieces has no single contiguous shard", pieces_.size());
  TS_CHECK(rank >= 0 && rank < ranks_, "rank {} outside a group of {}", rank, ranks_);
  return pieces_.empty() ? nn::ParamRange{0, 0} : part_of_piece(pieces_.front(), rank);
}

int64_t ShardLayout::shard_offset(int rank, int64_t at) const {
  int64_t before = 0;
  for (const nn::ParamRange& piece : pieces_) {
    const nn::ParamRange part = part_of_piece(piece, rank);
    if (at >= part.begin && at < part.end) return before + (at - part.begin);
    before += part.size();
  }
  TS_FAIL("flat element {} is outside rank {}'s shard", at, rank);
}

const nn::ParamRange& ShardLayout::piece_of(nn::ParamRange range) const {
  for (const nn::ParamRange& piece : pieces_) {
    if (range.begin >= piece.begin && range.end <= piece.end) return piece;
  }
  TS_FAIL("the range [{}, {}) does not lie inside one piece of the shard layout", range.begin, range.end);
}

nn::ParamRange ShardLayout::part(nn::ParamRange range, int rank) const {
  return intersect(range, part_of_piece(piece_of(range), rank));
}

std::vector<size_t> ShardLayout::counts(nn::ParamRange range) const {
  const nn::ParamRange& piece = piece_of(range);
  std::vector<size_t> out(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) {
    out[static_cast<size_t>(r)] = static_cast<size_t>(intersect(range, part_of_piece(piece, r)).size());
  }
  return out;
}

int64_t ShardLayout::largest_shard() const {
  int64_t best = 0;
  for (int r = 0; r < ranks_; ++r) best = std::max(best, shard_size(r));
  return best;
}

}  // namespace tessera::parallel
