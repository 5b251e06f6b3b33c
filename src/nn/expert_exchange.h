#pragma once
// Where a mixture-of-experts layer sends its tokens to the experts that other ranks hold, and takes
// their outputs back: the all-to-all of expert parallelism. The layer marks the places; the
// expert-parallel transform (parallel/expert_parallel.h) moves the rows over its group. With no
// exchange installed (one process, or a layout without expert parallelism) the layer holds every
// expert and nothing moves, so the one-process model runs the same code.
//
// Rank r of a group of P holds experts [r·E/P, (r+1)·E/P): a token's rows go to the rank of their
// expert, and every member calls each exchange at the same point of the same program.
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace tessera::nn {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int ranks() const = 0;  // P: members of the expert-parallel group
  virtual int rank() const = 0;   // this member's index
  // send.size() / P counts to each member, received the same way: how many rows this rank sends
  // each expert of each member, and how many each member sends this rank's experts.
  virtual void exchange_counts(std::span<const int32_t> send, std::span<int32_t> recv) = 0;
  // Rows [R, C]: the first send_rows[0] rows of `send` go to member 0, the next send_rows[1] to
  // member 1, ...; `recv` receives recv_rows[r] rows from member r, in member order.
  virtual void exchange_rows(const Tensor& send, std::span<const int64_t> send_rows, const Tensor& recv,
                             std::span<const int64_t> recv_rows) = 0;
};

}  // namespace tessera::nn
