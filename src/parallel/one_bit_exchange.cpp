#include "parallel/one_bit_exchange.h"

namespace tessera::parallel {

OneBitExchange::OneBitExchange(const optim::OneBitAdam& optimizer, std::vector<DataParallel*> domains)
    : optimizer_(optimizer), domains_(std::move(domains)) {}

void OneBitExchange::begin(const exec::Program& program) {
  if (!program.training) return;
  // The compressed steps keep each rank's gradient its own.
  reduced_ = !optimizer_.next_step_compressed();
  for (DataParallel* d : domains_) d->set_reducing(reduced_);
}

}  // namespace tessera::parallel
