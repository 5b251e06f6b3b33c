#include "kernels/cpu/sign_compression.h"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

// Both kernels run over 1-bit Adam's whole momentum every step (hundreds of millions of elements on
// a GPT-2-sized model), so each pass is written to vectorize: a block's magnitudes as one simd
// reduction, its signs eight to a byte, its error update as one select. Blocks start on byte
// boundaries (kSignBlock is a multiple of 8); only a vector's last block may end inside a byte.
static_assert(kSignBlock % 8 == 0);

void sign_compress(std::span<float> acc, uint8_t* bits, float* scales) {
  const size_t n = acc.size();
  for (size_t blk = 0; blk < sign_blocks(n); ++blk) {
    const size_t lo = blk * kSignBlock, len = std::min(n, lo + kSignBlock) - lo;
    float* a = acc.data() + lo;
    uint8_t* block_bits = bits + lo / 8;
    double magnitude = 0;
#pragma omp simd reduction(+ : magnitude)
    for (size_t i = 0; i < len; ++i) magnitude += std::fabs(static_cast<double>(a[i]));
    const float scale = static_cast<float>(magnitude / static_cast<double>(len));
    scales[blk] = scale;
    for (size_t byte = 0; byte < (len + 7) / 8; ++byte) {
      const size_t count = std::min<size_t>(8, len - byte * 8);
      unsigned packed = 0;
      for (size_t k = 0; k < count; ++k) packed |= static_cast<unsigned>(a[byte * 8 + k] >= 0) << k;
      block_bits[byte] = static_cast<uint8_t>(packed);
    }
#pragma omp simd
    for (size_t i = 0; i < len; ++i) a[i] -= a[i] >= 0 ? scale : -scale;  // the error fed back next time
  }
}

void add_sign_decompressed(std::span<float> out, const uint8_t* bits, const float* scales, float weight) {
  const size_t n = out.size();
  for (size_t blk = 0; blk < sign_blocks(n); ++blk) {
    const size_t lo = blk * kSignBlock, len = std::min(n, lo + kSignBlock) - lo;
    float* o = out.data() + lo;
    const uint8_t* block_bits = bits + lo / 8;
    const float scale = weight * scales[blk];
    const size_t whole_bytes = len / 8;
    for (size_t byte = 0; byte < whole_bytes; ++byte) {
      const unsigned packed = block_bits[byte];
      float* o8 = o + byte * 8;
      for (size_t k = 0; k < 8; ++k) o8[k] += (packed >> k & 1u) ? scale : -scale;
    }
    for (size_t i = whole_bytes * 8; i < len; ++i) o[i] += (block_bits[i / 8] >> (i % 8) & 1u) ? scale : -scale;
  }
}

}  // namespace tessera::kernels
