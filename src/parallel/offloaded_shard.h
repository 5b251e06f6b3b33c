#pragma once
// ZeRO-3's parameter shard in the nvme tier (memory.offload_params = "nvme"): this rank's elements
// of the flat parameter buffer, one extent per parameter's part of the shard. Why per parameter:
// the store moves whole extents (its writes pad the last block with zeros), and both readers cut
// the shard at parameter boundaries: a unit's gather reads the parts of the unit's parameters, an
// offloaded optimizer's chunk the parts of its whole parameters. A part smaller than a block
// costs a block of the file.
//
// Every transfer runs on the store's copy engine; the caller keeps the memory alive until the
// handles complete, and does not read a range while a write of it is in flight (the store orders
// nothing between them).
#include <memory>
#include <vector>

#include "memory/nvme_store.h"
#include "nn/parameters.h"
#include "optim/offloaded_optimizer.h"

namespace tessera::parallel {

class OffloadedShard final : public optim::OffloadedValues {
 public:
  using Works = std::vector<std::shared_ptr<memory::CopyWork>>;
  // `mine`: the shard's flat range; its parts are cut where `params` starts a parameter. Writes the
  // shard from `values` (mine.size() elements) and waits for the writes.
  OffloadedShard(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine,
                 const float* values);
  // The same extents with nothing written yet (a gradient shard, written as backward completes it).
  OffloadedShard(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine);
  ~OffloadedShard() override;
  OffloadedShard(const OffloadedShard&) = delete;
  OffloadedShard& operator=(const OffloadedShard&) = delete;

  // The flat elements `range` (inside the shard, starting and ending at parts' boundaries) from the
  // nvme tier into `into`, or from `from` into it; range.size() elements.
  Works read_range(nn::ParamRange range, float* into) const;
  Works write_range(nn::ParamRange range, const float* from);

  // optim::OffloadedValues: the owned order is the shard's.
  Works read(int64_t first, int64_t count, float* into) override;
  Works write(int64_t first, int64_t count, const float* from) override;

  nn::ParamRange range() const { return mine_; }
  // The parts, in flat order: [first, last) of those that make up `range` (on their boundaries),
  // and each one's flat elements.
  std::pair<size_t, size_t> parts_of(nn::ParamRange range) const;
  nn::ParamRange part(size_t index) const { return parts_.at(index).flat; }
  size_t parts() const { return parts_.size(); }

 private:
  struct Part {
    nn::ParamRange flat;
    memory::Extent extent;
  };
  memory::NvmeStore& store_;
  nn::ParamRange mine_;
  std::vector<Part> parts_;  // in flat order, covering mine_
};

// Waits for every handle, rethrowing the first error.
void wait_all(OffloadedShard::Works& works);

}  // namespace tessera::parallel
