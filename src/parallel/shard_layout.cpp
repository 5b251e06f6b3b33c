#include "parallel/shard_layout.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::parallel {

nn::ParamRange intersect(nn::ParamRange a, nn::ParamRange b) {
  const int64_t lo = std::max(a.begin, b.begin);
  const int64_t hi = std::min(a.end, b.end);
  return hi > lo ? nn::ParamRange{lo, hi} : nn::ParamRange{lo, lo};
}

ShardLayout::ShardLayout(int64_t numel, int ranks) : numel_(numel), ranks_(ranks) {
  TS_CHECK(numel >= 0 && ranks >= 1, "shard layout of {} elements over {} ranks", numel, ranks);
}

nn::ParamRange ShardLayout::shard(int rank) const {
  TS_CHECK(rank >= 0 && rank < ranks_, "rank {} outside a group of {}", rank, ranks_);
  const auto r = static_cast<int64_t>(rank);
  return {r * numel_ / ranks_, (r + 1) * numel_ / ranks_};
}

nn::ParamRange ShardLayout::part(nn::ParamRange range, int rank) const { return intersect(range, shard(rank)); }

std::vector<size_t> ShardLayout::counts(nn::ParamRange range) const {
  std::vector<size_t> out(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) out[static_cast<size_t>(r)] = static_cast<size_t>(part(range, r).size());
  return out;
}

}  // namespace tessera::parallel
