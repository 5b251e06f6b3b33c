#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {
// Checked up front and serially: an exception must not leave an OpenMP region.
int64_t check_targets(const int32_t* targets, int N, int V, int ignore_index) {
  int64_t count = 0;
  for (int n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    if (t == ignore_index) continue;
    TS_CHECK(t >= 0 && t < V,
             "cross_entropy: target {} at row {} is outside the vocabulary [0, {}) and is not ignore_index ({}); "
             "check the tokenizer's vocabulary against the model's vocab_size",
             t, n, V, ignore_index);
    ++count;
  }
  return count;
}

template <class T>
T row_max(const T* x, int V) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; ++v) mx = x[v] > mx ? x[v] : mx;
  return mx;
}
}  // namespace

template <class T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int ignore_index,
                             int64_t* count) {
  TS_CHECK(N >= 0 && V > 0, "cross_entropy_forward: bad shape N={} V={}", N, V);
  const int64_t valid = check_targets(targets, N, V, ignore_index);
  const size_t v_size = static_cast<size_t>(V);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * v_size))
  for (int n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) {
      losses[n] = 0;
      continue;
    }
    const T* x = logits + n * v_size;
    const T mx = row_max(x, V);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; ++v) sum += detail::vexp<T>(x[v] - mx);
    losses[n] = (mx - x[targets[n]]) + std::log(sum);
  }
  if (count != nullptr) *count = valid;
  // Summed serially so the total does not depend on the thread count.
  double total = 0;
  for (int n = 0; n < N; ++n) total += static_cast<double>(losses[n]);
  return valid > 0 ? total / static_cast<double>(valid) : 0.0;
}

template <class T>
double cross_entropy_forward_backward(T* logits_inout, T* losses, const int32_t* targets, int N, int V,
                                      int ignore_index, T grad_scale) {
  TS_CHECK(N >= 0 && V > 0, "cross_entropy_forward_backward: bad shape N={} V={}", N, V);
  check_targets(targets, N, V, ignore_index);
  const size_t v_size = static_cast<size_t>(V);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(N) * v_size))
  for (int n = 0; n < N; ++n) {
    T* x = logits_inout + n * v_size;
    const int32_t target = targets[n];
    if (target == ignore_index) {
#pragma omp simd
      for (int v = 0; v < V; ++v) x[v] = 0;
      losses[n] = 0;
      continue;
    }
    // Three passes over a row that stays in L2: max, exp (stored in place) and sum, then scale.
    const T mx = row_max(x, V);
    const T x_target = x[target];
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; ++v) {
      const T e = detail::vexp<T>(x[v] - mx);
      x[v] = e;
      sum += e;
    }
    losses[n] = (mx - x_target) + std::log(sum);
    const T k = grad_scale / sum;
#pragma omp simd
    for (int v = 0; v < V; ++v) x[v] *= k;
    x[target] -= grad_scale;
  }
  double total = 0;
  for (int n = 0; n < N; ++n) total += static_cast<double>(losses[n]);
  return total;
}

template double cross_entropy_forward<float>(float*, const float*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward_backward<float>(float*, float*, const int32_t*, int, int, int, float);
template double cross_entropy_forward_backward<double>(double*, double*, const int32_t*, int, int, int, double);

}  // namespace tessera::kernels
