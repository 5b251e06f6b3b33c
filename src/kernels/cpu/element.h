#pragma once
// Storage and compute types of the kernels. Every kernel is a template over the element type T its
// tensors are stored in: float and double (double is the tests' precise reference) compute in
// themselves; bf16 and f16 (mixed precision) are storage only and compute in float. So a kernel
// loads each element into compute_t<T>, does its arithmetic there, and rounds once when it stores.
//
// The rule of the signatures, the same in every kernel:
//   - data (activations, their gradients, weights' working copies): T;
//   - statistics the backward reads (norm means and reciprocal deviations, log-sum-exp, losses)
//     and parameter gradients, which accumulate over microbatches and ranks: compute_t<T>;
//   - scalars (epsilon, scales): compute_t<T>.
// For float and double load/store are the identity, so those instantiations compile to the very
// arithmetic they had before 16-bit types existed, bit for bit.
#include <cstddef>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace tessera::kernels {

template <class T>
struct Element {
  static_assert(std::is_floating_point_v<T>, "kernels store float, double, bf16 or f16");
  using Compute = T;
};
template <>
struct Element<bf16> {
  using Compute = float;
};
template <>
struct Element<f16> {
  using Compute = float;
};
template <class T>
using compute_t = typename Element<T>::Compute;

// Whether T is a 16-bit storage type (computes in float).
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

inline float load(bf16 x) { return to_float(x); }
inline float load(f16 x) { return to_float(x); }
inline float load(float x) { return x; }
inline double load(double x) { return x; }

// The value v rounded to T (nearest even for bf16 and f16).
template <class T>
inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_bf16(v);
  } else if constexpr (std::is_same_v<T, f16>) {
    return to_f16(v);
  } else {
    return v;
  }
}

// Bulk conversions between a storage type and its compute type (vectorized for bf16 and f16).
template <class T>
void widen(compute_t<T>* out, const T* in, size_t n);
template <class T>
void narrow(T* out, const compute_t<T>* in, size_t n);
// out[i] += in[i] widened, for 16-bit T: a sum of 16-bit messages in one pass, without a widened
// copy of each.
template <class T>
void add_widened(float* out, const T* in, size_t n);

// At least n elements of `buffer`, which only grows: a kernel that widens 16-bit tensors on every
// call keeps one per thread instead of allocating, zeroing and faulting in a fresh one each time.
// The contents are whatever the last call left.
template <class E>
E* scratch_of(std::vector<E>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// in[0, n) in compute_t<T>: the scratch of a kernel that runs its float algorithm on the widened
// values of 16-bit tensors (once per call: tests, decoding).
template <class T>
std::vector<compute_t<T>> widened(const T* in, size_t n) {
  std::vector<compute_t<T>> out(n);
  widen<T>(out.data(), in, n);
  return out;
}

}  // namespace tessera::kernels
