#pragma once
// ZeRO-3's gradient shard in the nvme tier (memory.offload_params = "nvme"): a reduced bucket's
// part of this rank is written there as soon as its reduction completes, instead of being added
// into a gradient shard in compute memory, and the offloaded optimizer reads each chunk's
// gradients back with its state (optim/offloaded_optimizer.h). So no step holds the whole gradient.
//
// The bits are those of the shard in memory:
// - A part's first window of the step (its first microbatch) is written as 0 + g, as the zeroed
//   shard would hold it; a later window reads the part back (one part at a time in compute memory,
//   tag grads), adds, and writes it again from the bucket.
// - Parts no window wrote read as zeros.
// - The global norm's squares are summed as sum_of_squares sums a run of the shard in memory:
//   chunk by chunk (kernels::kSquareChunks per run), each chunk summed once its last part is final.
//   A chunk inside one part is summed where it lies; one that straddles parts is copied together
//   first (tag grads, a chunk at a time per straddle).
// - The step's scalings (the loss scale's inverse, clipping) are applied as the optimizer reads
//   the gradient, in the order they were asked for.
// - Under sequence parallelism the parameters every tensor-parallel rank holds whole (norm gains,
//   row-parallel biases) get a partial gradient from each rank's part of the sequences, which the
//   shard in memory has summed over tp when the program finishes (TensorParallel::finish), before
//   the norm and the update read it. Here a part's final window sums those elements of it over
//   tp before its squares are taken and it is written: the same sums of the same values, in one
//   all-reduce per part instead of one for the shard. Every tp rank runs the same program on the
//   same layout, so its parts land in the same order, and the reducer lands them at the same
//   actions on each rank (gradient_reducer.h), so these all-reduces fall at the same place among
//   the region's collectives over tp. The sum of two values is the same whichever rank adds
//   first: at tp 2 the bits are those of the one all-reduce in memory; with more ranks an
//   all-reduce may add in an order that depends on where an element lies in the message.
//
// Runs are the norm's (GradNormService): consecutive segments split over the same dimensions.
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/allocator.h"
#include "dist/communicator.h"
#include "memory/nvme_store.h"
#include "nn/parameters.h"
#include "optim/offloaded_optimizer.h"
#include "parallel/offloaded_shard.h"

namespace tessera::parallel {

class OffloadedGradients final : public optim::OffloadedGradients {
 public:
  using Works = OffloadedShard::Works;
  // `mine`: this rank's shard (flat elements); `segments`: its master segments in owned order,
  // which is the shard's order (their grads are not read). `sequence_parallel` (null: none): the
  // tensor-parallel group over which the gradients of the parameters it does not split are partial
  // sums, summed over it as each part's last window lands; kept by reference.
  OffloadedGradients(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine,
                     std::span<const optim::Segment> segments, MemoryAccountant& memory,
                     dist::Communicator* sequence_parallel = nullptr);

  // Whether a landing may run a collective (the sum over tp): the caller must then land parts at
  // the same points of the program on every rank of that group.
  bool lands_collectively() const { return sequence_parallel_ != nullptr; }

  // A step's gradient begins: every element zero, no squares, no scaling. Every write of the step
  // before must have been waited for.
  void begin_step();

  // One window's reduced gradient of `part` (flat, on parameters' parts' boundaries), at `reduced`,
  // which becomes the sum with what earlier windows wrote and is written from there: the caller
  // keeps it alive until the writes complete. `final`: no later window of this step adds to it.
  // Collective over the sequence-parallel group when `final`, on every rank with the same `part`.
  Works land(nn::ParamRange part, float* reduced, bool final);

  // The squares of the run of `count` elements from owned element `first`, summed as
  // kernels::sum_of_squares sums them in memory. Every window of the step has landed.
  double squares(int64_t first, int64_t count);
  // The step multiplies the gradient by `factor` (after any earlier factor).
  void scale_when_read(float factor) { scales_.push_back(factor); }

  // optim::OffloadedGradients
  Works read(int64_t first, int64_t count, float* into) override;
  std::span<const float> scales() const override { return scales_; }

 private:
  struct Chunk {
    int64_t begin = 0, end = 0;  // flat elements
    int64_t landed = 0;          // elements final this step
    double squares = 0;
    Tensor gathered;  // a straddling chunk's elements, while some are still to land
  };
  struct Run {
    int64_t first = 0, count = 0;  // owned elements
    std::vector<Chunk> chunks;
  };
  void add_squares(nn::ParamRange part, const float* values);
  // Sums the elements of `part` (at `values`) that every tensor-parallel rank holds whole over tp.
  void sum_replicated(nn::ParamRange part, float* values);

  OffloadedShard shard_;
  MemoryAccountant& memory_;
  std::vector<Run> runs_;              // in owned order
  std::vector<bool> written_;          // [shard part] written this step
  std::vector<Works> last_writes_;     // [shard part] its latest write
  std::vector<float> scales_;
  dist::Communicator* sequence_parallel_ = nullptr;
  std::vector<nn::ParamRange> replicated_;  // flat, in flat order: whole on every tp rank
};

}  // namespace tessera::parallel
