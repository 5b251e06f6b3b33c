#include "kernels/cpu/sign_compression.h"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

void sign_compress(std::span<float> acc, uint8_t* bits, float* scales) {
  const size_t n = acc.size();
  std::fill(bits, bits + sign_bits_bytes(n), uint8_t{0});
  for (size_t blk = 0; blk < sign_blocks(n); ++blk) {
    const size_t lo = blk * kSignBlock, hi = std::min(n, lo + kSignBlock);
    double magnitude = 0;
    for (size_t i = lo; i < hi; ++i) magnitude += std::fabs(acc[i]);
    const float scale = static_cast<float>(magnitude / static_cast<double>(hi - lo));
    scales[blk] = scale;
    for (size_t i = lo; i < hi; ++i) {
      const bool positive = acc[i] >= 0;
      if (positive) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      acc[i] -= positive ? scale : -scale;  // the error fed back next time
    }
  }
}

void add_sign_decompressed(std::span<float> out, const uint8_t* bits, const float* scales, float weight) {
  for (size_t i = 0; i < out.size(); ++i) {
    const float scale = weight * scales[i / kSignBlock];
    out[i] += (bits[i / 8] >> (i % 8) & 1u) ? scale : -scale;
  }
}

}  // namespace tessera::kernels
