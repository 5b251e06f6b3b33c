#include "kernels/cpu/linear.h"

#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC) {
  TS_CHECK(N >= 0 && IC >= 0 && OC >= 0, "linear_forward: negative size N={} IC={} OC={}", N, IC, OC);
  matmul<T, T>(out, inp, weight, bias, N, OC, IC, Transpose::No, Transpose::Yes, false);
}

template <class T>
void linear_backward(T* dinp, compute_t<T>* dweight, compute_t<T>* dbias, const T* dout, const T* inp, const T* weight, int N, int IC,
                     int OC) {
  TS_CHECK(N >= 0 && IC >= 0 && OC >= 0, "linear_backward: negative size N={} IC={} OC={}", N, IC, OC);
  if (dinp != nullptr) matmul<T, T>(dinp, dout, weight, nullptr, N, IC, OC, Transpose::No, Transpose::No, false);
  if (dweight != nullptr) matmul<T, compute_t<T>>(dweight, dout, inp, nullptr, OC, IC, N, Transpose::Yes, Transpose::No, true);
  if (dbias != nullptr) {
    detail::for_column_ranges(OC, static_cast<size_t>(N) * OC, [&](int c0, int c1) {
      for (int n = 0; n < N; ++n) {
        const T* row = dout + static_cast<size_t>(n) * OC;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dbias[c] += load(row[c]);
      }
    });
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                      int);
template void linear_forward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int);
template void linear_forward<f16>(f16*, const f16*, const f16*, const f16*, int, int, int);
template void linear_backward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, int, int, int);
template void linear_backward<f16>(f16*, float*, float*, const f16*, const f16*, const f16*, int, int, int);

}  // namespace tessera::kernels
