#pragma once
// ZeRO's memory and communication, as formulas (Rajbhandari et al., 2020, fp32 with Adam), for
// one rank of a data-parallel group of N over a model of Ψ parameters. Tests hold the allocator's
// measurements and the communicator's byte counters to these numbers.
//
// Padding: none. Shards are the exact ranges of ShardLayout (⌊Ψ/N⌋ or ⌈Ψ/N⌉ elements), so where
// the paper writes Ψ/N these functions use this rank's actual shard size s_r; s_r differs from
// Ψ/N by less than one element.
#include <cstdint>

namespace tessera::parallel {

struct ZeroBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// Bytes of the tags params, grads and optimizer on a rank with shard size `shard` (elements):
//   stage 0: 4Ψ + 4Ψ + 8Ψ          = 16Ψ
//   stage 1: 4Ψ + 4Ψ + 8 s_r       = 8Ψ + 8Ψ/N
//   stage 2: 4Ψ + 4 s_r + 8 s_r    = 4Ψ + 12Ψ/N
//   stage 3: 4 s_r + 4 s_r + 8 s_r = 16Ψ/N
ZeroBytes zero_bytes(int stage, int64_t numel, int64_t shard);

// Bytes one rank sends per optimizer step for the gradients and parameters of Ψ elements, by the
// ring convention of dist/ops.h (one all-reduce of Ψ f32 elements is 2 (N-1)/N × 4Ψ bytes):
//   stages 0, 1, 2: one all-reduce's volume (stage 0 all-reduces; stages 1 and 2 reduce-scatter
//                   the gradients and all-gather the parameters, each half of it)
//   stage 3:        1.5 × that: parameters all-gathered in forward and again in backward, and the
//                   gradients reduce-scattered
// Gradient accumulation over M microbatches: stages 2 and 3 reduce-scatter every microbatch (and
// stage 3 gathers every microbatch), so their volume grows with M; stages 0 and 1 do not.
// Not included: the few doubles of the loss and norm sums (sum_over_ranks); for stage 3 the head,
// whose forward and backward run back to back and share one gather per microbatch (so its
// parameters are gathered once less), and a tied head's token embedding, gathered once more.
double zero_step_bytes(int stage, int64_t numel, int ranks, int micros);

}  // namespace tessera::parallel
