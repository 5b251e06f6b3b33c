#include "kernels/cpu/adam8bit.h"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

BlockMaxima adam8bit_block(float* param, const float* grad, const uint8_t* m_codes, const uint8_t* v_codes,
                           float m_scale, float v_scale, const float* signed_code, const float* unsigned_code,
                           float* new_m, float* new_v, size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int64_t step) {
  const float b1 = beta1, b2 = beta2;
  // As the AdamW kernel forms its scalars: in double, rounded once.
  const double bias_correction1 = 1.0 - std::pow(double(b1), double(step));
  const double bias_correction2 = 1.0 - std::pow(double(b2), double(step));
  const auto step_size = static_cast<float>(double(lr) / bias_correction1);
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const auto w1 = static_cast<float>(1.0 - double(b1)), w2 = static_cast<float>(1.0 - double(b2));
  const auto decay = static_cast<float>(1.0 - double(lr) * double(weight_decay));
  float m_absmax = 0, v_absmax = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = signed_code[m_codes[i]] * m_scale;
    const float v = unsigned_code[v_codes[i]] * v_scale;
    const float mi = b1 * m + w1 * g;
    const float vi = b2 * v + w2 * g * g;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    new_m[i] = mi;
    new_v[i] = vi;
    m_absmax = std::max(m_absmax, std::abs(mi));
    v_absmax = std::max(v_absmax, vi);
  }
  return {m_absmax, v_absmax};
}

uint8_t nearest_code(const float* code, size_t code_size, float x) {
  const float* end = code + code_size;
  const float* above = std::lower_bound(code, end, x);
  if (above == code) return 0;
  if (above == end) return static_cast<uint8_t>(code_size - 1);
  const float* below = above - 1;
  return static_cast<uint8_t>((x - *below <= *above - x ? below : above) - code);
}

void quantize_to_codes(uint8_t* out, const float* values, size_t n, const float* code, size_t code_size, float absmax) {
  for (size_t i = 0; i < n; ++i) out[i] = nearest_code(code, code_size, absmax > 0.0f ? values[i] / absmax : 0.0f);
}

}  // namespace tessera::kernels
