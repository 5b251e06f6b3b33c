#pragma once
// The k elements of largest magnitude, ties to the lower index: the selection top-k gradient
// compression sends (parallel/compression/top_k.cpp). Every rank and every rerun must pick the same
// set, so the order is total: |x| descending, then the index ascending.
//
// By radix selection on the magnitude's bits rather than a comparison sort: for floats that are
// not NaN, |x| orders as the integer bits(x) & 0x7fffffff, so two histogram passes (the key's high
// and low halves) find the k-th largest key, and one more pass collects, in index order, every
// element above it and the first of those equal to it. A NaN's key lies above infinity's: it is
// taken first, where a comparison of magnitudes would leave the selection undefined.
#include <cstdint>
#include <span>
#include <vector>

namespace tessera::kernels {

// The indices of the k largest |values[i]| (ties to the lower index), ascending. 0 < k <= size.
std::vector<int32_t> top_k_magnitude_indices(std::span<const float> values, int64_t k);

// Top-k compression's work on one rank, either side of its exchange: the gradient added into the
// error feedback `residual` and its k largest entries taken out of it (zeroed there: what stays is
// fed back next step), in index order; then the reduced gradient rebuilt from every rank's entries.
// The compressor runs these, and the planner's calibration times them (plan::KernelCosts::top_k).
struct SparseEntries {
  std::vector<int32_t> index;
  std::vector<float> values;
};
SparseEntries take_top_k_with_feedback(std::span<float> residual, std::span<const float> grad, int64_t k);
// grad = the sum of the entries (index, value), zero elsewhere.
void scatter_entries(std::span<float> grad, std::span<const int32_t> index, std::span<const float> values);

}  // namespace tessera::kernels
