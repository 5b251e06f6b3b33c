#pragma once
// A copy of n elements between buffers that do not overlap: the CPU backend's part of moving a
// shard's values into a gathered parameter, or a parameter's into a shard. Types as in
// kernels/cpu/element.h.
#include <cstddef>

namespace tessera::kernels {

template <class T>
void copy(T* dst, const T* src, size_t n);

}  // namespace tessera::kernels
