#pragma once
// The optimizer `optim.name` names, built over this rank's owned segments, and the bytes of state
// it keeps for them.
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "dist/communicator.h"

#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

// The groups an optimizer that exchanges its own state averages over (1-bit Adam's momentum): a
// segment of the layout belongs to groups[group_of[i]] (one entry per segment; empty: every segment
// to groups[0]). A null group or a group of one still runs the exchange, over one member.
struct ExchangeGroups {
  std::vector<dist::Communicator*> groups;
  std::vector<int> group_of;
};

// `store`: every parameter of the model (the layout of per-tensor statistics tables); `layout`:
// the segments every step will pass, in order; `reduction`: how per-tensor statistics are summed
// over the shards of a tensor (null in a one-process run or without ZeRO); `exchange`: the groups
// of 1-bit Adam's momentum (read by onebit_adam only, which needs it).
std::unique_ptr<Optimizer> make_optimizer(MemoryAccountant& memory, const OptimizerConfig& config,
                                          const nn::ParameterStore& store, std::span<const Segment> layout,
                                          const ShardReduction* reduction, const ExchangeGroups* exchange = nullptr);

// The optimizer-state bytes an optimizer keeps for `layout` (allocated with tag 'optimizer'):
//   adamw, lamb:  8 per element (m, v)
//   onebit_adam:  12 per element (m, v, and the error feedback of its compressed momentum)
//   sgd, lars:    4 per element (momentum buffer), 0 without momentum
//   adafactor:    4 (rows + columns) per factored matrix segment (the whole matrix's R and C, even
//                 for a part of it), 4 per element of other segments; + 4 per element with first_moment
//   adam8bit:     2 per element (m and v codes) + 8 per block touched (m and v absmax) for quantized
//                 parameters; 8 per element for embeddings and tensors under 4096 elements
int64_t state_bytes(const OptimizerConfig& config, std::span<const Segment> layout);

// For the planner, which counts parameters rather than tensors: the state bytes per parameter of a
// large model, where matrices dominate (Adafactor's factored statistics, O(n + m) per matrix, and
// 8-bit blocks' scales counted as their share per element).
double state_bytes_per_parameter(const OptimizerConfig& config);

}  // namespace tessera::optim
