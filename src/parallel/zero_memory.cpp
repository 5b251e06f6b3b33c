#include "parallel/zero_memory.h"

#include "core/check.h"

namespace tessera::parallel {

ZeroBytes zero_bytes(int stage, int64_t numel, int64_t shard) {
  switch (stage) {
    case 0: return {4 * numel, 4 * numel, 8 * numel};
    case 1: return {4 * numel, 4 * numel, 8 * shard};
    case 2: return {4 * numel, 4 * shard, 8 * shard};
    case 3: return {4 * shard, 4 * shard, 8 * shard};
    default: TS_FAIL("ZeRO stage must be 0, 1, 2 or 3, got {}", stage);
  }
}

double zero_step_bytes(int stage, int64_t numel, int ranks, int micros) {
  const double all_reduce = 2.0 * (ranks - 1) / ranks * 4.0 * static_cast<double>(numel);
  switch (stage) {
    case 0:
    case 1: return all_reduce;
    // Per microbatch a reduce-scatter (half an all-reduce); once per step the parameter all-gather.
    case 2: return all_reduce / 2 * micros + all_reduce / 2;
    // Per microbatch: gathers in forward and backward, and a reduce-scatter.
    case 3: return 1.5 * all_reduce * micros;
    default: TS_FAIL("ZeRO stage must be 0, 1, 2 or 3, got {}", stage);
  }
}

}  // namespace tessera::parallel
