#include "kernels/cpu/copy.h"

#include <cstring>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

template <class T>
void copy(T* dst, const T* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n * sizeof(T));
}

template void copy<float>(float*, const float*, size_t);
template void copy<bf16>(bf16*, const bf16*, size_t);
template void copy<f16>(f16*, const f16*, size_t);

}  // namespace tessera::kernels
