#pragma once
// Per-tensor optimizer statistics reduced over the groups that shard tensors' elements
// (optim/tensor_statistics.h): the data-parallel group under ZeRO. Sums are exact and identical on
// every rank (all-gathered as raw doubles and added in rank order, parallel/rank_sum.h); maxima are
// exact in any order.
#include <array>

#include "config/parallel_layout.h"
#include "dist/communicator.h"
#include "optim/tensor_statistics.h"

namespace tessera::parallel {

class GroupShardReduction final : public optim::ShardReduction {
 public:
  // groups[d]: this rank's communicator of mesh dimension d, given only for the dimensions that
  // shard elements (null elsewhere, or where the group has one rank).
  explicit GroupShardReduction(std::array<dist::Communicator*, config::kMeshDims.size()> groups);

  uint32_t sharded_dims() const override { return dims_; }
  void sum(int dim, std::span<double> values) const override;
  void max(int dim, std::span<float> values) const override;

 private:
  std::array<dist::Communicator*, config::kMeshDims.size()> groups_;
  uint32_t dims_ = 0;
};

}  // namespace tessera::parallel
