#pragma once
// 8-bit codes for optimizer state (Dettmers et al. 2022): a value is stored as the index of the
// nearest entry of a sorted codebook of at most 256 values in [-1, 1] (signed) or [0, 1]
// (unsigned), after division by its block's largest magnitude (absmax).
//
// Dynamic (tree) codes spend their bits on magnitude: after the sign (signed codes only), E
// leading zero bits give the decade 10^−E, a one bit ends them, and the remaining F bits place the
// value linearly within [0.1, 1) of that decade (the midpoints of 2^F equal steps). Signed: E =
// 0..6 with F = 6 − E (127 magnitudes each side); unsigned: the sign bit becomes a fraction bit,
// E = 0..6 with F = 7 − E (254). Both add 0 and 1, so zero and a block's largest positive value are
// exact (256 entries; −1 is not, and rounds to the largest negative entry, as bitsandbytes' map).
// Linear codes are equal steps: k/127 − 1 for k = 0..254 (signed), k/255 for k = 0..255.
// Stored indexes address the sorted codebook, not the bit layout above.
#include <cstdint>
#include <span>
#include <vector>

namespace tessera::optim {

enum class Quantization { Dynamic, Linear };

std::vector<float> codebook(Quantization kind, bool is_signed);
// The index of the codebook entry nearest to x (the lower one on a tie).
uint8_t nearest_code(std::span<const float> codebook, float x);

}  // namespace tessera::optim
