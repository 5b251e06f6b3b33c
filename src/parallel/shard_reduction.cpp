#include "parallel/shard_reduction.h"

#include <algorithm>

#include "parallel/rank_sum.h"

namespace tessera::parallel {

GroupShardReduction::GroupShardReduction(std::array<dist::Communicator*, config::kMeshDims.size()> groups)
    : groups_(groups) {
  for (size_t d = 0; d < groups_.size(); ++d) {
    if (groups_[d] != nullptr && groups_[d]->size() > 1) dims_ |= 1u << d;
  }
}

void GroupShardReduction::sum(int dim, std::span<double> values) const {
  dist::Communicator* group = groups_.at(static_cast<size_t>(dim));
  if (group == nullptr || group->size() == 1 || values.empty()) return;
  const std::vector<double> summed = sum_over_ranks(group, values);
  std::copy(summed.begin(), summed.end(), values.begin());
}

void GroupShardReduction::max(int dim, std::span<float> values) const {
  dist::Communicator* group = groups_.at(static_cast<size_t>(dim));
  if (group == nullptr || group->size() == 1 || values.empty()) return;
  group->all_reduce(values, dist::ReduceOp::Max)->wait();
}

}  // namespace tessera::parallel
