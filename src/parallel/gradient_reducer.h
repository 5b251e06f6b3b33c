#pragma once
// Gradient reduction by buckets (see buckets.h), posted asynchronously from the backward hooks as
// soon as a bucket is complete, so it overlaps the backward of the units still to run.
//
// The trainer's loss scale is 1 / (tokens of the global batch), so each rank's local gradient is
// its partial sum of the global-batch mean: every reduction is a SUM, and the result is the mean
// gradient of the global batch whatever the number of ranks.
//
//   stage 0 (DP)    all-reduce each bucket in place in the full gradient buffer.
//   stage 1         reduce-scatter each bucket in place: this rank's part of the bucket ends up
//                   reduced (the rest of the buffer is scratch until the next step zeroes it).
//   stages 2 and 3  no full gradient buffer. A bucket's storage (tag comm) is allocated and zeroed
//                   at the before_backward of the first unit that writes into it, the parameters'
//                   grad views are pointed into it, and after its reduce-scatter completes this
//                   rank's part is added into the persistent gradient shard (tag grads) and the
//                   storage is freed. At most kMaxInFlight buckets are in flight; a new bucket
//                   waits for the oldest beyond that.
//
// Gradient accumulation: stages 0 and 1 reduce only on the last microbatch (the others accumulate
// locally, with no communication). Stages 2 and 3 have no full buffer to accumulate in, so they
// reduce-scatter every microbatch and accumulate into the shard, as DeepSpeed does.
#include <deque>
#include <map>
#include <vector>

#include "dist/communicator.h"
#include "nn/parameters.h"
#include "parallel/buckets.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

class GradientReducer {
 public:
  static constexpr size_t kMaxInFlight = 2;

  // `grad_shard` ([shard size], stages 2 and 3 only) receives this rank's reduced gradients.
  GradientReducer(nn::ParameterStore& params, const std::vector<nn::Unit>& units, const ShardLayout& layout, int rank,
                  dist::Communicator* comm, MemoryAccountant& memory, int stage, int64_t bucket_elems,
                  float* grad_shard);
  ~GradientReducer();

  // `reduce`: whether this microbatch's backward posts reductions (stages 2 and 3 always do).
  void begin_microbatch(bool reduce);
  void before_backward(int unit);
  void after_backward(int unit);
  // Waits for every reduction posted (stages 2 and 3: and adds them into the shard).
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Upper bound of the 'comm' bytes live at once for bucket storage (stages 2 and 3):
  // (kMaxInFlight + most buckets filling at once) × the largest bucket.
  size_t storage_bound_bytes() const;

 private:
  struct InFlight {
    int bucket = 0;
    Tensor storage;  // stages 2 and 3
    dist::WorkPtr work;
  };
  bool sharded_grads() const { return stage_ >= 2; }
  void allocate(int bucket);
  void post(int bucket);
  void complete(InFlight& f);
  void complete_oldest();

  nn::ParameterStore& params_;
  ShardLayout layout_;
  int rank_;
  dist::Communicator* comm_;
  MemoryAccountant& memory_;
  int stage_;
  float* grad_shard_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<nn::Parameter*>> bucket_params_;
  bool reduce_ = false;
  std::map<int, Tensor> filling_;  // bucket -> storage, allocated and not yet posted
  std::deque<InFlight> in_flight_;
};

}  // namespace tessera::parallel
