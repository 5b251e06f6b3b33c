#include "dist/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/check.h"

namespace tessera::dist {

std::unique_ptr<Communicator> Communicator::split_groups(const std::vector<std::vector<int>>& groups,
                                                         const std::string& name) {
  // Every member checks the whole list, so a bad list fails on all of them alike instead of
  // leaving some waiting in the split.
  std::vector<int> seen(static_cast<size_t>(size()), 0);
  int color = -1;
  int key = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    TS_CHECK(!groups[g].empty(), "split_groups '{}': group {} is empty", name, g);
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const int r = groups[g][i];
      TS_CHECK(r >= 0 && r < size(), "split_groups '{}': group {} names rank {}, but '{}' has ranks 0..{}", name, g, r,
               this->name(), size() - 1);
      TS_CHECK(seen[static_cast<size_t>(r)] == 0, "split_groups '{}': rank {} is in more than one group", name, r);
      seen[static_cast<size_t>(r)] = 1;
      if (r == rank()) {
        color = static_cast<int>(g);
        key = static_cast<int>(i);
      }
    }
  }
  return split(color, key, name);
}

WorkPtr Communicator::reduce_scatter(const void* input, void* output, size_t count_per_rank, DType dtype,
                                     ReduceOp op) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count_per_rank);
  return reduce_scatter(input, output, counts, dtype, op);
}

WorkPtr Communicator::all_gather(const void* input, void* output, size_t count_per_rank, DType dtype) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count_per_rank);
  return all_gather(input, output, counts, dtype);
}

WorkPtr Communicator::all_to_all(const void* input, void* output, size_t count_per_rank, DType dtype) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count_per_rank);
  return all_to_all(input, counts, output, counts, dtype);
}

WorkPtr Communicator::all_reduce(const Tensor& t, ReduceOp op) {
  TS_CHECK(t.defined() && t.is_contiguous(), "all_reduce on '{}' needs a defined contiguous tensor (got {})", name(),
           t.defined() ? t.shape_string() : "undefined");
  return all_reduce(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), op);
}

WorkPtr Communicator::broadcast(const Tensor& t, int root) {
  TS_CHECK(t.defined() && t.is_contiguous(), "broadcast on '{}' needs a defined contiguous tensor (got {})", name(),
           t.defined() ? t.shape_string() : "undefined");
  return broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), root);
}

std::string Communicator::describe() const {
  return fmt::format("{}: rank {} of {} (group ranks {})", name(), rank(), size(), format_ranks(group_ranks()));
}

std::vector<size_t> chunk_offsets(std::span<const size_t> counts) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

std::string format_ranks(const std::vector<int>& ranks) { return fmt::format("{}", fmt::join(ranks, ",")); }

}  // namespace tessera::dist
