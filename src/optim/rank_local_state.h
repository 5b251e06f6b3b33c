#pragma once
// State of a rank's own that persists across steps and differs from rank to rank — a compressor's
// error feedback, 1-bit Adam's worker and server errors — so checkpoints keep it per rank, with the
// step it has reached and the name of what it belongs to (a resume checks the two agree). Here,
// beside the optimizers, because 1-bit Adam is one of them; the gradient compressors
// (parallel/compression) hold such state too.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tessera::optim {

class RankLocalState {
 public:
  virtual ~RankLocalState() = default;
  virtual std::string_view rank_state_owner() const = 0;
  // Named tensors (views of its storage: loading into them loads it).
  virtual std::vector<std::pair<std::string, Tensor>> rank_state_tensors() = 0;
  virtual int64_t rank_state_step() const = 0;
  virtual void set_rank_state_step(int64_t step) = 0;
};

}  // namespace tessera::optim
