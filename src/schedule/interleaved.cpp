// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM PTD-P), v model chunks per rank.
//
// Stage s = c * p + r lives on rank r as chunk c, so each rank holds v non-consecutive slices of
// the model and a microbatch visits every rank v times. Each rank walks its m * v (chunk,
// microbatch) units in groups of p microbatches: forward unit k is microbatch (k / pv) * p + k % p
// of chunk (k % pv) / p; backward unit k the same microbatch of chunk v - 1 - (k % pv) / p. After
// (p - r - 1) * 2 + (v - 1) * p warm-up forwards the rank alternates one forward with one
// backward. Grouping by p is why m must be a multiple of p. With v = 1 this is exactly 1F1B.
#include <algorithm>

#include "schedule/compute_order.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule make_interleaved(const config::ParallelLayout& layout, const GeneratorOptions& options) {
  Schedule s = start_schedule(ScheduleKind::Interleaved, layout, options);
  const int p = s.ranks, m = s.microbatches, v = s.chunks;
  if (v == 1) {
    Schedule plain = make_one_f_one_b(layout, options);
    plain.kind = ScheduleKind::Interleaved;
    return plain;
  }
  const int units = m * v;
  const auto microbatch = [&](int k) { return k / (p * v) * p + k % p; };
  const auto chunk = [&](int k, bool forward) {
    const int c = k % (p * v) / p;
    return forward ? c : v - 1 - c;
  };
  for (int r = 0; r < p; ++r) {
    auto& order = s.programs[r];
    // With m == p there is no steady state to alternate in: like Megatron, run every forward first.
    const int warmup = m == p ? units : std::min((p - r - 1) * 2 + (v - 1) * p, units);
    const auto forward = [&](int k) { push_compute(order, s, Op::Forward, s.stage_of(r, chunk(k, true)), microbatch(k)); };
    const auto backward = [&](int k) {
      push_compute(order, s, Op::Backward, s.stage_of(r, chunk(k, false)), microbatch(k));
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < units - warmup; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (int k = units - warmup; k < units; ++k) backward(k);
    push_optimizer_steps(order, s, r, 1);
  }
  place_transfers(s);
  return s;
}

}  // namespace tessera::pipeline
