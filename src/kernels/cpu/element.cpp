#include "kernels/cpu/element.h"

#include <algorithm>

namespace tessera::kernels {

template <>
void widen<float>(float* out, const float* in, size_t n) {
  std::copy(in, in + n, out);
}
template <>
void widen<double>(double* out, const double* in, size_t n) {
  std::copy(in, in + n, out);
}
template <>
void widen<bf16>(float* out, const bf16* in, size_t n) {
  convert_bf16_to_f32(out, in, n);
}
template <>
void widen<f16>(float* out, const f16* in, size_t n) {
  convert_f16_to_f32(out, in, n);
}

template <>
void narrow<float>(float* out, const float* in, size_t n) {
  std::copy(in, in + n, out);
}
template <>
void narrow<double>(double* out, const double* in, size_t n) {
  std::copy(in, in + n, out);
}
template <>
void narrow<bf16>(bf16* out, const float* in, size_t n) {
  convert_f32_to_bf16(out, in, n);
}
template <>
void narrow<f16>(f16* out, const float* in, size_t n) {
  convert_f32_to_f16(out, in, n);
}

template <class T>
void add_widened(float* out, const T* in, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] += to_float(in[i]);
}
template void add_widened<bf16>(float*, const bf16*, size_t);
template void add_widened<f16>(float*, const f16*, size_t);

}  // namespace tessera::kernels
