#pragma once
// 8-bit Adam's per-element work (Dettmers et al. 2022; optim/adam8bit.h): moments stored as the
// indexes of a sorted codebook's entries (optim/quantization.h) times their block's scale, the
// block's largest magnitude.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

struct BlockMaxima {
  float m = 0;  // the largest |m|
  float v = 0;  // the largest v
};

// One block's run of n elements: dequantizes m and v (code × scale), advances them with grad as
// AdamW does (decoupled weight decay, bias corrections formed in double and rounded once), updates
// param, writes the new moments in f32 to new_m and new_v, and returns their largest magnitudes,
// which scale them when they are quantized again (quantize_to_codes).
BlockMaxima adam8bit_block(float* param, const float* grad, const uint8_t* m_codes, const uint8_t* v_codes,
                           float m_scale, float v_scale, const float* signed_code, const float* unsigned_code,
                           float* new_m, float* new_v, size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int64_t step);

// The index of the entry of `code` (code_size entries, sorted) nearest to x, the lower on a tie
// (optim::nearest_code's rule, on the backend's memory).
uint8_t nearest_code(const float* code, size_t code_size, float x);
// out[i] = nearest_code(values[i] / absmax), or of 0 when absmax is 0.
void quantize_to_codes(uint8_t* out, const float* values, size_t n, const float* code, size_t code_size, float absmax);

}  // namespace tessera::kernels
