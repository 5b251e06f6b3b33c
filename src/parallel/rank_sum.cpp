#include "parallel/rank_sum.h"

#include <cstring>

namespace tessera::parallel {

std::vector<double> sum_over_ranks(dist::Communicator* comm, std::span<const double> values) {
  if (comm == nullptr || comm->size() == 1) return {values.begin(), values.end()};
  const auto n = static_cast<size_t>(comm->size());
  const size_t bytes = values.size() * sizeof(double);
  std::vector<double> all(values.size() * n);
  std::vector<size_t> counts(n, bytes);
  comm->all_gather(values.data(), all.data(), counts, DType::U8)->wait();
  std::vector<double> sum(values.size(), 0.0);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < values.size(); ++i) sum[i] += all[r * values.size() + i];
  }
  return sum;
}

uint64_t sum_over_ranks_bytes(size_t count, int ranks) {
  return ranks <= 1 ? 0 : static_cast<uint64_t>(ranks - 1) * count * sizeof(double);
}

}  // namespace tessera::parallel
