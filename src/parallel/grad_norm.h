#pragma once
// The global gradient norm as a service of the parallel layout: every rank passes the segments of
// its master copy (optim/optimizer.h), and every rank gets the same norm of the whole model's
// gradient. A segment's squares are summed over the groups of the dimensions its parameter is
// split over (Segment::sharded_over: ZeRO's shards over dp, tensor-parallel blocks over tp, ...)
// and counted once over the others, where every rank holds the same values.
//
// The result also says whether the gradient is finite. The norm is already agreed (the same sums,
// in rank order, on every rank), so every rank reaches the same verdict with no extra message, and
// all skip the optimizer step together when it is not.
#include <array>
#include <optional>
#include <span>

#include "dist/communicator.h"
#include "config/parallel_layout.h"
#include "optim/optimizer.h"

namespace tessera::parallel {

class OffloadedGradients;

struct GradNorm {
  double norm = 0;
  bool non_finite = false;
};

class GradNormService {
 public:
  // groups[d]: this rank's communicator of mesh dimension d (null where the dimension has one rank).
  explicit GradNormService(std::array<dist::Communicator*, config::kMeshDims.size()> groups = {});

  // `found_non_finite`: this rank saw a value that is not finite where the segments no longer show
  // it (a compressor may leave it out of its message); the norm is then non-finite on every rank.
  // Segments that carry no gradient have it in `elsewhere` (ZeRO-3's gradients in the nvme tier),
  // which sums their squares as a run in memory would be.
  GradNorm compute(std::span<const optim::Segment> segments, bool found_non_finite = false,
                   OffloadedGradients* elsewhere = nullptr) const;
  // PyTorch's clip_grad_norm_: scales every segment's gradient by max_norm / (norm + 1e-6) when
  // that is below 1 and max_norm > 0; nothing for a non-finite norm. Returns the factor it scaled
  // by, for a gradient held elsewhere to be scaled by it too.
  static std::optional<float> clip(std::span<const optim::Segment> segments, const GradNorm& norm, double max_norm);

 private:
  std::array<dist::Communicator*, config::kMeshDims.size()> groups_;
};

}  // namespace tessera::parallel
