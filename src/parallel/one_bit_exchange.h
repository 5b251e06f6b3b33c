#pragma once
// 1-bit Adam's exchange (optim/one_bit_adam.h) as a transform in the chain's gradient-exchange
// slot (exec/transform.h): whether a training program's gradients are reduced over the
// data-parallel groups. During the optimizer's warm-up they are, and it steps on the reduced
// gradient; after optim.freeze_step each rank keeps its own gradient and the optimizer exchanges
// its compressed momentum itself. Decided as the program begins, before the reductions in the
// slots inside this one plan their buckets; the optimizer step reads the decision (reduced()).
#include <string_view>
#include <vector>

#include "exec/transform.h"
#include "optim/one_bit_adam.h"
#include "parallel/data_parallel.h"

namespace tessera::parallel {

class OneBitExchange final : public exec::Transform {
 public:
  // Keeps `optimizer` and the data-parallel `domains` (the dense one and, under expert
  // parallelism, the experts') by reference.
  OneBitExchange(const optim::OneBitAdam& optimizer, std::vector<DataParallel*> domains);

  std::string_view name() const override { return "1-bit Adam exchange"; }
  void begin(const exec::Program& program) override;

  // Whether the running (or the last) training program's gradients are reduced over the groups.
  bool reduced() const { return reduced_; }

 private:
  const optim::OneBitAdam& optimizer_;
  std::vector<DataParallel*> domains_;
  bool reduced_ = true;
};

}  // namespace tessera::parallel
