#pragma once
// PipeDream-2BW's double-buffered weights (Narayanan et al. 2021) as a storage owner. It holds the
// working role of this rank's parameters (those its stages' units read) and answers each unit
// action with the weight version the action names (exec::Action::weight_version, counted in
// optimizer steps since training began):
//   - the newest version is the store's values, which the optimizer updates in place;
//   - the version before it is the stash: a copy of this rank's parameters taken right before each
//     optimizer step. Microbatches of batch b + 1 started on version b before batch b's step made
//     version b + 1, and their remaining forwards and backwards must read the same weights.
// Any other version is an error naming the action: double buffering keeps two. The stash is
// allocated once, up front, under MemoryTag::WeightStash: it is what 2BW costs in memory (one
// more copy of the rank's parameters), and the accountant shows it as such.
//
// The model's parameter views are never rewritten: the owner answers per action through the
// ownership (exec/ownership.h), as ZeRO-3 answers with gathered buffers.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "exec/ownership.h"
#include "nn/parameters.h"
#include "nn/unit.h"

namespace tessera::parallel {

class WeightVersions final : public exec::StorageOwner {
 public:
  // Claims the working role of `params` from `ownership`; the values the store holds now are
  // version 0 and nothing is stashed yet.
  WeightVersions(nn::ParameterStore& store, std::vector<const nn::Parameter*> params, MemoryAccountant& memory,
                 exec::ParameterOwnership& ownership);
  ~WeightVersions() override;
  WeightVersions(const WeightVersions&) = delete;
  WeightVersions& operator=(const WeightVersions&) = delete;

  // The version the store's values are: optimizer steps applied to them.
  int64_t newest() const { return newest_; }
  bool holds_previous() const { return holds_previous_; }
  // Right before an optimizer step: the newest version is copied into the stash, where the next
  // batch's remaining actions read it; the step makes version newest() + 1 in the store.
  void before_step();
  // After a checkpoint load: the store holds version `newest`, and the stash (written through
  // previous()) version newest - 1 (none when newest is 0).
  void restore(int64_t newest);
  // The stash parameter by parameter, as views ([the parameter's shape]) a checkpoint reads from or
  // loads into; this rank's parameters in store order.
  std::vector<std::pair<const nn::Parameter*, Tensor>> previous();
  size_t stash_bytes() const { return static_cast<size_t>(stash_.numel()) * sizeof(float); }

  // exec::StorageOwner
  std::string_view owner_name() const override { return "PipeDream-2BW weight versions"; }
  Tensor working(const nn::Parameter& p, const exec::Event* event) override;
  bool working_copies_persist() const override { return true; }  // the store's values and the stash

 private:
  Tensor stashed(const nn::Parameter& p);

  nn::ParameterStore& store_;
  exec::ParameterOwnership& ownership_;
  std::vector<const nn::Parameter*> params_;
  std::vector<int64_t> stash_offset_;  // [parameter id]: where it starts in the stash; -1: not this rank's
  Tensor stash_;                       // [elements of this rank's parameters], tag weight_stash
  int64_t newest_ = 0;
  bool holds_previous_ = false;
};

// The parameters the units `units` read (each once, in store order): a pipeline rank's share.
std::vector<const nn::Parameter*> parameters_of_units(const nn::ParameterStore& store,
                                                      const std::vector<nn::Unit>& all_units,
                                                      std::span<const int> units);

}  // namespace tessera::parallel
