#pragma once
// One-bit (sign) compression with error feedback: each element's sign, scaled by the mean magnitude
// of its block of kSignBlock elements (one scale for a whole bucket would flatten layers whose
// gradients differ by orders of magnitude), one bit an element. The gradient compressor
// (parallel/compression) and 1-bit Adam's momentum exchange (optim/one_bit_adam.h) share it.
#include <cstddef>
#include <cstdint>
#include <span>

namespace tessera::kernels {

inline constexpr size_t kSignBlock = 512;
inline size_t sign_blocks(size_t elements) { return (elements + kSignBlock - 1) / kSignBlock; }
inline size_t sign_bits_bytes(size_t elements) { return (elements + 7) / 8; }
// Compresses `acc` into `bits` (sign_bits_bytes) and `scales` (sign_blocks) and leaves in `acc`
// what the message does not carry: the error to feed back.
void sign_compress(std::span<float> acc, uint8_t* bits, float* scales);
// out += weight × the decompressed message.
void add_sign_decompressed(std::span<float> out, const uint8_t* bits, const float* scales, float weight);

}  // namespace tessera::kernels
