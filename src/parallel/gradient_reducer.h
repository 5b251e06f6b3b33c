#pragma once
// Gradient reduction by buckets (see buckets.h), a transform in the GradientReduction slot of the
// chain: each bucket's reduction is posted asynchronously right after the program's last action
// that writes its gradients, so it overlaps the actions still to run. Where that is comes from the
// program, not from call order, so the rule holds for any schedule: with gradient accumulation the
// last microbatch's backward; with a split backward the last weight half (zero-bubble's W).
//
// The trainer's loss scale is 1 / (tokens of the global batch), so each rank's local gradient is
// its partial sum of the global-batch mean: every reduction is a SUM, and the result is the mean
// gradient of the global batch whatever the number of ranks.
//
//   stage 0 (DP)    all-reduce each bucket in place in the store's gradient buffer, once per step.
//   stage 1         reduce-scatter each bucket in place, once per step: this rank's part of the
//                   bucket ends up reduced (the rest of the buffer is scratch until the next step).
//   stages 2 and 3  no whole gradient buffer: this transform owns every parameter's gradient
//                   target. A bucket's storage (tag comm) exists per microbatch, from the first
//                   action that writes into it for that microbatch to the last; then it is
//                   reduce-scattered, this rank's part added into the persistent gradient shard
//                   (tag grads) and the storage freed (DeepSpeed's scheme: there is nothing to
//                   accumulate microbatches in). At most kMaxInFlight buckets are in flight; a new
//                   one waits for the oldest beyond that, and for those posted before the action
//                   preceding it: they have had a whole action to finish, and completing them then
//                   makes the comm tag's peak the one plan::engine_zero_comm_walk predicts, not
//                   one that depends on how soon the communicator happened to finish.
//   stage 3, nvme   the reduced part is written to the gradient shard in the nvme tier instead
//                   (offloaded_gradients.h), from the bucket's storage, which lives until the write
//                   is done: it is waited for under the same rule (posted before the action
//                   preceding a new bucket), but not for the count of buckets in flight, so a
//                   unit's writes run while the next unit computes. Under sequence parallelism
//                   a part's last window is summed over tp as it lands, a collective: a bucket is
//                   then completed only by those rules, never sooner because its reduction
//                   happened to be done, so every tp rank lands it at the same action.
#include <deque>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/transform.h"
#include "nn/parameters.h"
#include "parallel/buckets.h"
#include "parallel/compression/compressor.h"
#include "parallel/offloaded_gradients.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

class GradientReducer final : public exec::Transform, public exec::StorageOwner {
 public:
  static constexpr size_t kMaxInFlight = 2;

  // Buckets cover the layout's pieces. `grad_shard` ([shard size], stages 2 and 3 only) receives
  // this rank's reduced gradients; then the reducer claims the gradient role of the parameters
  // `ids` (those inside the pieces) from `ownership`.
  // `offloaded` (stage 3, instead of `grad_shard`): the gradient shard in the nvme tier, where each
  // reduced part is written (offloaded_gradients.h).
  GradientReducer(nn::ParameterStore& params, const std::vector<nn::Unit>& units, const ShardLayout& layout, int rank,
                  dist::Communicator* comm, MemoryAccountant& memory, int stage, int64_t bucket_elems,
                  float* grad_shard, exec::ParameterOwnership& ownership, std::span<const int> ids,
                  OffloadedGradients* offloaded = nullptr);
  ~GradientReducer() override;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Each bucket's elements and the matrices inside it, for a compressor.
  std::vector<BucketShape> bucket_shapes() const;
  // From the step after `warmup_steps`, buckets are reduced by `compressor` instead of the dense
  // collective (synchronously, when the bucket completes). Null: dense reductions.
  void set_compressor(GradientCompressor* compressor, int64_t warmup_steps) {
    compressor_ = compressor;
    warmup_steps_ = warmup_steps;
  }
  // Whether a bucket this step held a value that is not finite before the compressor saw it: with
  // a loss scale the step is then skipped on every rank (the norm says so), also when the
  // compressor's message happened to leave the value out. Reset when a program begins.
  bool compressed_non_finite() const { return compressed_non_finite_; }
  // Whether buckets are reduced at all: an optimizer that exchanges its own state instead (1-bit
  // Adam after its warm-up) turns reduction off for the steps it compresses, and each rank's
  // gradient stays its own. Stage 0 only (the run config refuses ZeRO with such an optimizer).
  void set_reducing(bool reducing);
  bool reducing() const { return reducing_; }
  // Dense reductions send `dtype` (BF16 or F16; F32: the default) and sum in f32 (parallel.grad_dtype):
  // each rank's bucket is rounded once to the 16-bit type and exchanged by an all-to-all, every rank
  // sums its chunk of the bucket from every member's in f32, and (stage 0) the sums are rounded once
  // more and all-gathered. Half the bytes of an f32 reduction, with two roundings whatever the
  // group's size, where a reduction in 16 bits would round at every step of the ring.
  void set_message_dtype(DType dtype);
  // Upper bound of the 'comm' bytes live at once for bucket storage (stages 2 and 3), for a program
  // of one microbatch in flight: (kMaxInFlight + most buckets filling at once) × the largest bucket.
  size_t storage_bound_bytes() const;

  // exec::Transform
  std::string_view name() const override { return stage_ >= 2 ? "ZeRO gradient reduction" : "gradient reduction"; }
  void begin(const exec::Program& program) override;
  void before(const exec::Event& event) override;
  void after(const exec::Event& event) override;
  void finish(const exec::Program& program) override;

  // exec::StorageOwner (stages 2 and 3)
  std::string_view owner_name() const override { return "ZeRO-2/3 gradient buckets"; }
  Tensor gradient_target(const nn::Parameter& p, const exec::Event* event) override;

 private:
  // A bucket's reduction window: one per step (stages 0, 1: -1 - the batch, for programs of several
  // batches) or per microbatch.
  using Window = std::pair<int, int>;  // (bucket, microbatch)
  struct InFlight {
    Window window;
    int posted_after = 0;  // the program action after which it was posted
    Tensor storage;  // stages 2 and 3
    dist::WorkPtr work;
    // 16-bit messages (set_message_dtype): the bucket rounded, and every member's chunk of this
    // rank's part of it, which complete() sums into `data`.
    Tensor sent, received;
    float* data = nullptr;
  };
  bool sharded_grads() const { return stage_ >= 2; }
  void allocate(Window w, int action);
  void post(Window w, int action);
  void complete(InFlight& f);
  // The 16-bit exchange of one bucket (set_message_dtype): posts the all-to-all of f.sent.
  void post_low_precision(InFlight& f, const Bucket& b);
  // Sums what it received into this rank's part of the bucket (and, stage 0, all-gathers the sums).
  void complete_low_precision(InFlight& f);
  void complete_oldest();
  // Waits for the oldest write to the nvme tier and frees its bucket.
  void finish_oldest_write();

  nn::ParameterStore& params_;
  ShardLayout layout_;
  int rank_;
  dist::Communicator* comm_;
  MemoryAccountant& memory_;
  int stage_;
  float* grad_shard_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;                      // [parameter id]
  std::vector<std::vector<bool>> writes_bucket_;    // [unit][bucket]
  std::map<int, std::vector<Window>> open_before_;  // action index -> windows opening there
  std::map<int, std::vector<Window>> post_after_;   // action index -> windows complete after it
  std::map<Window, Tensor> filling_;                // allocated and not yet posted
  std::deque<InFlight> in_flight_;
  OffloadedGradients* offloaded_ = nullptr;
  struct Writing {
    OffloadedGradients::Works writes;
    Tensor storage;  // the bucket's, which the writes read
    int posted_after = 0;
  };
  std::deque<Writing> writing_;        // reduced parts on their way to the nvme tier
  std::map<int, int> final_window_;    // bucket -> the microbatch whose window is its last this step
  GradientCompressor* compressor_ = nullptr;
  int64_t warmup_steps_ = 0;
  bool reducing_ = true;
  bool compressed_non_finite_ = false;
  DType message_dtype_ = DType::F32;
};

}  // namespace tessera::parallel
