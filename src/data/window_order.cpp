#include "data/window_order.h"

#include <bit>

#include "core/check.h"
#include "core/rng.h"

namespace tessera::data {

namespace {
constexpr int kRounds = 6;
constexpr uint64_t kStream = stream_id("data:window_order");
}  // namespace

WindowOrder::WindowOrder(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n), seed_(seed), epoch_(epoch) {
  TS_CHECK(n > 0, "cannot order zero windows");
  TS_CHECK(n <= (uint64_t{1} << 62), "too many windows ({}) to order", n);
  const int bits = n <= 1 ? 1 : std::bit_width(n - 1);
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t WindowOrder::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int round = 0; round < kRounds; ++round) {
    // Philox's 64-bit counter holds the half value (< 2^31) and the round; the epoch goes into the
    // stream so epochs never share counters.
    uint32_t w[4];
    Philox::generate(seed_, kStream + epoch_, (static_cast<uint64_t>(round) << 32) | right, w);
    const uint64_t f = ((static_cast<uint64_t>(w[0]) << 32) | w[1]) & half_mask_;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t WindowOrder::operator()(uint64_t index) const {
  TS_CHECK(index < n_, "window position {} is outside the epoch's {} windows", index, n_);
  uint64_t x = feistel(index);
  while (x >= n_) x = feistel(x);
  return x;
}

}  // namespace tessera::data
