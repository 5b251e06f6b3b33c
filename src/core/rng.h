#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A value depends only on
// (seed, stream, index): element i of a dropout mask or of a weight initialization is the same
// whichever rank, thread or tile computes it, so results do not depend on the parallel layout.
#include <cmath>
#include <cstdint>

namespace tessera {

struct Philox {
  // Four 32-bit random words for counter `index` in `stream` under `seed`.
  static inline void generate(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
    uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
      uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  }
};

// Uniform float in [0, 1) for element `index` of `stream`: 24 random bits, exact in float.
inline float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t w[4];
  Philox::generate(seed, stream, index, w);
  return static_cast<float>(w[0] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal for element `index` of `stream` (Box-Muller on one Philox block).
inline float normal(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t w[4];
  Philox::generate(seed, stream, index, w);
  // u1 in (0, 1] so the log is finite; u2 in [0, 1).
  double u1 = (static_cast<double>(w[0]) + 1.0) * (1.0 / 4294967296.0);
  double u2 = static_cast<double>(w[1]) * (1.0 / 4294967296.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Stable stream ids from names ("init:blocks.3.attn.qkv.weight", "dropout:resid"), so adding a
// parameter does not shift the random numbers of the others. FNV-1a, 64-bit.
constexpr uint64_t stream_id(const char* name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* p = name; *p != 0; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace tessera
