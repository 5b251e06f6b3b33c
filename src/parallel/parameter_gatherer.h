#pragma once
// ZeRO-3's parameters. Each rank keeps only its shard of the flat parameter buffer (tag params,
// ⌊Ψ/N⌋ or ⌈Ψ/N⌉ elements); the full buffer is released. Before a unit's forward, and again
// before its backward, the ranges the unit reads are all-gathered into a buffer tagged 'comm' and
// the unit's Parameter views are pointed into it; after the unit they are pointed at nothing and
// the buffer is freed. A stray read of a parameter that is not gathered fails loudly ("access to
// the data of an undefined tensor") instead of reading stale values.
//
// Prefetch: a pass is the sequence F0, F1, ..., F(K-1) (forward of the K units) followed, in
// training, by B(K-1), ..., B0. When item i starts, the gather of item i+1 is posted, so it moves
// while unit i computes. At most two gathered buffers live at once (the current item's and the
// next one's): the 'comm' bound is twice the largest unit.
//
// Volume: each pass gathers every unit's ranges once in forward and once in backward; a tied head
// reads the token embedding, which is then gathered a second time in each direction.
#include <map>
#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "nn/parameters.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

class ParameterGatherer {
 public:
  // Copies this rank's shard out of the (initialized) full buffer, then releases the full buffer
  // and points every Parameter's value at nothing.
  ParameterGatherer(nn::ParameterStore& params, const std::vector<nn::Unit>& units, const ShardLayout& layout, int rank,
                    dist::Communicator* comm, MemoryAccountant& memory);
  ~ParameterGatherer();

  float* shard() { return shard_.data<float>(); }  // flat element shard_begin + i at i

  // A new pass: a training microbatch (forward then backward) or an evaluation (forward only).
  void begin_pass(bool with_backward);
  void before(int unit, bool backward);
  void after(int unit, bool backward);

  // Largest gathered buffer of one unit, in bytes (two of them live at once).
  size_t largest_unit_bytes() const;

  // Every parameter gathered into one buffer (tag comm) until the returned handle goes away, for
  // code that runs the model without hooks (sampling) or reads it whole (checkpoints). Collective.
  class Full {
   public:
    Full(ParameterGatherer& owner, Tensor buffer) : owner_(&owner), buffer_(std::move(buffer)) {}
    Full(Full&&) noexcept = default;
    ~Full();
    // Copies this rank's part of the full buffer back into its shard (after loading a checkpoint).
    void write_back();

   private:
    ParameterGatherer* owner_;
    Tensor buffer_;
  };
  Full gather_all();

 private:
  struct Gathered {
    std::vector<Tensor> buffers;  // one per range the unit reads
    std::vector<dist::WorkPtr> works;
  };
  struct UnitParams {
    std::vector<nn::ParamRange> ranges;
    std::vector<std::vector<nn::Parameter*>> params;  // the parameters inside each range
  };
  int unit_of(int item) const { return item < units() ? item : 2 * units() - 1 - item; }
  int units() const { return static_cast<int>(unit_params_.size()); }
  void post(int item);
  void point(int unit, const Gathered& g);
  void unpoint(int unit);
  void drain();

  nn::ParameterStore& params_;
  ShardLayout layout_;
  int rank_;
  dist::Communicator* comm_;
  MemoryAccountant& memory_;
  nn::ParamRange mine_;
  Tensor shard_;  // [shard size], tag params
  std::vector<UnitParams> unit_params_;
  std::map<int, Gathered> slots_;  // pass item -> its gather (current and prefetched)
  int pass_items_ = 0;
};

}  // namespace tessera::parallel
