#pragma once
// Per-tensor statistics of a sharded parameter, exact. Some optimizers read a statistic of a whole
// tensor (LAMB's and LARS' norms, Adafactor's row and column sums, an 8-bit block's largest
// magnitude), while under ZeRO a rank holds only a range of the tensor's elements. Each rank
// computes its part's partial statistic into a table laid out over EVERY parameter of the model
// (the same layout on every rank, so the collective lines up whatever each rank holds), and the
// table is reduced over the groups of the mesh dimensions that shard elements: sums for sums, the
// maximum for maxima. A parameter this rank does not hold contributes zero.
//
// The optimizer library does not communicate: it asks a ShardReduction, which the parallel layer
// implements over its communicators (parallel/shard_reduction.h); a one-process run passes none.
#include <cstdint>
#include <span>
#include <vector>

#include "optim/optimizer.h"

namespace tessera::optim {

class ShardReduction {
 public:
  virtual ~ShardReduction() = default;
  // The mesh dimensions (a bit per config::MeshDim) whose ranks hold different elements of one
  // tensor; the reductions below run over each of their groups.
  virtual uint32_t sharded_dims() const = 0;
  // Element-wise over the ranks of dimension `dim`, in place; every rank gets the same bits.
  virtual void sum(int dim, std::span<double> values) const = 0;
  virtual void max(int dim, std::span<float> values) const = 0;
};

// A table of `slots(p)` doubles per parameter p of the model, summed over the shards of each.
class TensorSums {
 public:
  // `slots[id]`: the entries of the parameter with that id (every parameter of the store).
  explicit TensorSums(std::vector<int64_t> slots);
  std::span<double> of(const nn::Parameter& p);
  void clear();
  // Sums each parameter's entries over the dimensions its segment is sharded over (the bits of
  // `segments`' sharded_over that the reduction shards). Collective over those groups.
  void reduce(const ShardReduction* reduction, std::span<const Segment> segments);

 private:
  std::vector<int64_t> offsets_;  // [id]: first entry; one more at the end
  std::vector<double> values_;
};

}  // namespace tessera::optim
