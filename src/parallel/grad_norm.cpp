#include "parallel/grad_norm.h"

#include <cmath>
#include <limits>
#include <map>

#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/residual.h"
#include "parallel/offloaded_gradients.h"
#include "parallel/rank_sum.h"

namespace tessera::parallel {

GradNormService::GradNormService(std::array<dist::Communicator*, config::kMeshDims.size()> groups) : groups_(groups) {}

GradNorm GradNormService::compute(std::span<const optim::Segment> segments, bool found_non_finite,
                                  OffloadedGradients* elsewhere) const {
  // Squares by sharding class. Segments that follow each other in memory are summed as one run, so
  // a whole flat buffer (or a ZeRO shard) gives the bits of one pass over it.
  // A class is keyed by the dimensions its squares are summed over; a dimension with one rank
  // sums nothing. Every rank reduces every class the layout allows, in the same order, even where
  // it holds none of it: under ZeRO a rank's shard may hold only split parameters and its peer's
  // only replicated ones, and the two must still call the same collectives.
  uint32_t reducing = 0;
  for (size_t d = 0; d < groups_.size(); ++d) {
    if (groups_[d] != nullptr && groups_[d]->size() > 1) reducing |= 1u << d;
  }
  std::map<uint32_t, double> by_class;
  for (uint32_t mask = reducing;; mask = (mask - 1) & reducing) {  // every subset of `reducing`
    by_class[mask] = 0.0;
    if (mask == 0) break;
  }
  int64_t owned = 0;  // elements before segment i
  for (size_t i = 0; i < segments.size();) {
    const bool held_here = segments[i].grad != nullptr;
    size_t j = i + 1;
    int64_t n = segments[i].size();
    // A gradient held elsewhere is one shard, in owned order.
    while (j < segments.size() && segments[j].sharded_over == segments[i].sharded_over &&
           (held_here ? segments[j].grad == segments[i].grad + n : segments[j].grad == nullptr)) {
      n += segments[j].size();
      ++j;
    }
    double squares = 0;
    if (held_here) {
      squares = kernels::sum_of_squares(segments[i].grad, static_cast<size_t>(n));
    } else {
      TS_CHECK(elsewhere != nullptr || n == 0, "the gradient norm: segment of '{}' carries no gradient",
               segments[i].param->name);
      if (n > 0) squares = elsewhere->squares(owned, n);
    }
    by_class[segments[i].sharded_over & reducing] += squares;
    owned += n;
    i = j;
  }
  // Into the class every rank sums over every dimension, so that all of them see it.
  if (found_non_finite) by_class[reducing] = std::numeric_limits<double>::infinity();
  double total = 0;
  for (auto [mask, sum] : by_class) {
    for (size_t d = 0; d < groups_.size(); ++d) {
      if ((mask >> d & 1u) != 0) sum = sum_over_ranks(groups_[d], std::span(&sum, 1))[0];
    }
    total += sum;
  }
  GradNorm g;
  g.norm = std::sqrt(total);
  g.non_finite = !std::isfinite(g.norm);
  return g;
}

std::optional<float> GradNormService::clip(std::span<const optim::Segment> segments, const GradNorm& norm,
                                           double max_norm) {
  if (!(max_norm > 0) || norm.non_finite) return std::nullopt;
  const double coef = max_norm / (norm.norm + 1e-6);  // as kernels::clip_grad_norm, so the bits agree
  if (coef >= 1.0) return std::nullopt;
  for (const optim::Segment& s : segments) {
    if (s.grad != nullptr) kernels::scale_inplace(s.grad, static_cast<float>(coef), static_cast<size_t>(s.size()));
  }
  return static_cast<float>(coef);
}

}  // namespace tessera::parallel
