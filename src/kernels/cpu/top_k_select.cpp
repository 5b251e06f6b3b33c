#include "kernels/cpu/top_k_select.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>

#include "core/check.h"

namespace tessera::kernels {

namespace {

uint32_t magnitude_key(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

constexpr int kLowBits = 15;  // a key has 31 bits: 16 high, 15 low
constexpr uint32_t kLowMask = (1u << kLowBits) - 1;

// The bin, counted from the top, where the running count of `histogram` reaches `rank` (1-based),
// and how many elements lie in the bins above it.
struct Bin {
  uint32_t bin = 0;
  int64_t above = 0;
};
template <size_t N>
Bin bin_of_rank(const std::array<uint32_t, N>& histogram, int64_t rank) {
  int64_t above = 0;
  for (size_t b = N; b-- > 0;) {
    if (above + histogram[b] >= rank) return {static_cast<uint32_t>(b), above};
    above += histogram[b];
  }
  TS_CHECK(false, "top-k selection: rank {} above the {} elements counted", rank, above);
  return {};
}

}  // namespace

std::vector<int32_t> top_k_magnitude_indices(std::span<const float> values, int64_t k) {
  const auto n = static_cast<int64_t>(values.size());
  TS_CHECK(k > 0 && k <= n, "top-k selection of {} among {} elements", k, n);
  TS_CHECK(n <= std::numeric_limits<int32_t>::max(), "top-k selection over {} elements: indices are 32-bit", n);
  // The k-th largest key: its high half first, then its low half among the keys that share it.
  auto high = std::make_unique<std::array<uint32_t, size_t{1} << 16>>();
  high->fill(0);
  for (const float x : values) ++(*high)[magnitude_key(x) >> kLowBits];
  const Bin h = bin_of_rank(*high, k);
  auto low = std::make_unique<std::array<uint32_t, size_t{1} << kLowBits>>();
  low->fill(0);
  for (const float x : values) {
    const uint32_t key = magnitude_key(x);
    if ((key >> kLowBits) == h.bin) ++(*low)[key & kLowMask];
  }
  const Bin l = bin_of_rank(*low, k - h.above);
  const uint32_t kth = (h.bin << kLowBits) | l.bin;
  // Every key above the k-th, and the first `ties` equal to it in index order.
  int64_t ties = k - h.above - l.above;
  std::vector<int32_t> index;
  index.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(values[static_cast<size_t>(i)]);
    if (key > kth || (key == kth && ties-- > 0)) index.push_back(static_cast<int32_t>(i));
  }
  return index;
}

SparseEntries take_top_k_with_feedback(std::span<float> residual, std::span<const float> grad, int64_t k) {
  TS_CHECK(residual.size() == grad.size(), "top-k: an error feedback of {} elements for a gradient of {}",
           residual.size(), grad.size());
  for (size_t i = 0; i < grad.size(); ++i) residual[i] += grad[i];
  SparseEntries sent;
  sent.index = top_k_magnitude_indices(residual, k);
  sent.values.resize(sent.index.size());
  for (size_t j = 0; j < sent.index.size(); ++j) {
    const auto i = static_cast<size_t>(sent.index[j]);
    sent.values[j] = residual[i];
    residual[i] = 0;
  }
  return sent;
}

void scatter_entries(std::span<float> grad, std::span<const int32_t> index, std::span<const float> values) {
  TS_CHECK(index.size() == values.size(), "top-k: {} indices for {} values", index.size(), values.size());
  std::fill(grad.begin(), grad.end(), 0.0f);
  for (size_t j = 0; j < index.size(); ++j) grad[static_cast<size_t>(index[j])] += values[j];
}

}  // namespace tessera::kernels
