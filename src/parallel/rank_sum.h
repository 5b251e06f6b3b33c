#pragma once
// Sums a few doubles over a group (loss and token counts, squared gradient norms) exactly as
// double and identically on every rank: the values are all-gathered as raw bytes and added in
// rank order. The communicator reduces floating point only in f32 and an MPI reduction's order is
// the library's choice; this costs (N-1) × 8 bytes per value instead.
#include <span>
#include <vector>

#include "dist/communicator.h"

namespace tessera::parallel {

// Element-wise sums over the ranks of `comm` (nullptr: a group of one, the values themselves).
std::vector<double> sum_over_ranks(dist::Communicator* comm, std::span<const double> values);

// Bytes one sum_over_ranks of `count` values sends from one rank, by the communicator's convention.
uint64_t sum_over_ranks_bytes(size_t count, int ranks);

}  // namespace tessera::parallel
