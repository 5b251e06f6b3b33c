#pragma once
// Gradient compression: a strategy of the data-parallel gradient reducer (parallel/
// gradient_reducer.h). Where the reducer would all-reduce (or reduce-scatter) a bucket, a
// compressor replaces the bucket's local gradient with an approximation of the SUM over the group,
// exchanging less than the dense gradient:
//
//   topk      the largest |g| (compression.ratio of each bucket) with error feedback: what is not
//             sent is kept and added to the next step's gradient (Lin et al. 2018; Stich et al.
//             2018); values and indices all-gathered; after a dense warm-up the ratio ramps down
//             geometrically over as many steps
//   qsgd      each element stochastically rounded to one of compression.levels levels of its
//             512-element block's norm (Alistarh et al. 2017): unbiased, one byte an element and a
//             norm a block, all-gathered; the rounding is keyed by (seed, step, rank, bucket,
//             element), so reruns are identical
//   onebit    the sign of each element times its 512-element block's mean |g|, with error
//             feedback (Seide et al. 2014; Bernstein et al. 2018): one bit an element and a scale
//             a block, all-gathered
//   powersgd  each matrix of the bucket as P Qᵀ of rank compression.rank by one power iteration on
//             the group's sum, Q warm-started from the previous step, with error feedback (Vogels
//             et al. 2019); vectors, and matrices too small to gain, are all-reduced exactly; after
//             the dense warm-up the rank ramps down as top-k's ratio does (the share sent from 1)
//
// The reduction is synchronous: a compressed bucket is exchanged when the reducer posts it (the
// decompression needs every rank's part). The state that persists across steps (error feedback,
// PowerSGD's Q) lives here, per bucket, so ZeRO-2/3's transient bucket storage does not lose it;
// under ZeRO the reducer then keeps this rank's part of the decompressed sum, as after a
// reduce-scatter. The first compression.warmup_steps steps reduce exactly.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/compression_method.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "dist/communicator.h"
#include "optim/rank_local_state.h"

namespace tessera::parallel {

// The method and its options are part of the run config (config/compression_method.h).
using config::compression_name;
using config::CompressionMethod;
using config::CompressionOptions;
using config::parse_compression;

// A bucket as a compressor sees it: its elements, and the matrices inside it (PowerSGD
// approximates those; everything else of the bucket is reduced exactly).
struct BucketShape {
  struct Matrix {
    int64_t offset = 0;  // first element inside the bucket
    int64_t rows = 0;
    int64_t cols = 0;
  };
  int64_t elements = 0;
  std::vector<Matrix> matrices;
};

// A rank's own state across steps, which checkpoints keep per rank (optim/rank_local_state.h).
using optim::RankLocalState;

class GradientCompressor : public RankLocalState {
 public:
  ~GradientCompressor() override = default;
  virtual std::string_view name() const = 0;
  // Replaces `grad`, this rank's gradient of bucket `bucket`, by the approximation of the sum over
  // `comm` of every member's. Collective over `comm`; every member calls it with the same bucket.
  virtual void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) = 0;
  // The bytes this rank sends to reduce `bucket` in a group of `ranks` (the communicator's
  // counters show exactly this; `rank` is this rank's place in the group).
  virtual uint64_t wire_bytes(int bucket, int ranks, int rank) const = 0;
  // Its persistent state as named tensors (views of its storage), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state() { return {}; }

  // A training step begins; the first `warmup_steps` reduce exactly.
  void begin_step() { ++step_; }
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  bool active(int64_t warmup_steps) const { return step_ > warmup_steps; }

  // RankLocalState: its state and the step its random rounding is keyed by.
  std::string_view rank_state_owner() const override { return name(); }
  std::vector<std::pair<std::string, Tensor>> rank_state_tensors() override { return state(); }
  int64_t rank_state_step() const override { return step_; }
  void set_rank_state_step(int64_t step) override { step_ = step; }

 private:
  int64_t step_ = 0;  // training steps begun (1 during the first)
};

// Under expert parallelism the experts' gradients are reduced over their own group (edp) by a
// compressor of their own, beside the dense parameters' over dp: checkpoints keep both as one
// rank-local state, the experts' tensors named under "experts.". The two begin their steps
// together, so the dense one's step stands for both.
class JointRankState final : public RankLocalState {
 public:
  JointRankState(GradientCompressor& dense, GradientCompressor& experts) : dense_(dense), experts_(experts) {}
  std::string_view rank_state_owner() const override { return dense_.rank_state_owner(); }
  std::vector<std::pair<std::string, Tensor>> rank_state_tensors() override;
  int64_t rank_state_step() const override { return dense_.rank_state_step(); }
  void set_rank_state_step(int64_t step) override {
    dense_.set_rank_state_step(step);
    experts_.set_rank_state_step(step);
  }

 private:
  GradientCompressor& dense_;
  GradientCompressor& experts_;
};

// The compressor of `options.method` for these buckets (nullptr for None). `rank` is this rank's
// place in the data-parallel group (it keys QSGD's random rounding).
std::unique_ptr<GradientCompressor> make_compressor(const CompressionOptions& options,
                                                    std::vector<BucketShape> buckets, MemoryAccountant& memory,
                                                    int rank);

// Compressed elements a bucket of `elements` sends under top-k at `ratio`: ⌈ratio·n⌉, at least 1.
int64_t top_k_count(int64_t elements, double ratio);

}  // namespace tessera::parallel
