#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

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

template <class T>
double vocab_parallel_cross_entropy(T* logits_inout, T* losses, const int32_t* targets, int N, int V, int real,
                                    int first, int vocab, int ignore_index, T grad_scale, const RowReduce<T>& max_over,
                                    const RowReduce<T>& sum_over) {
  TS_CHECK(N >= 0 && V > 0 && real >= 0 && real <= V && first >= 0 && vocab > 0,
           "vocab_parallel_cross_entropy: bad shape N={} V={} real={} first={} vocab={}", N, V, real, first, vocab);
  check_targets(targets, N, vocab, ignore_index);
  const size_t v_size = static_cast<size_t>(V);
  const size_t n_size = static_cast<size_t>(N);
  const bool parallel = detail::worth_parallel(n_size * v_size);
  // Per row: the maximum, then the target's logit, then the sum of exponentials, each combined
  // over the ranks before the next pass needs it.
  std::vector<T> mx(n_size), target_logit(n_size), sum(n_size);
  auto holds = [&](int32_t t) { return t != ignore_index && t >= first && t < first + real; };
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    const T* x = logits_inout + n * v_size;
    mx[static_cast<size_t>(n)] = real > 0 ? row_max(x, real) : -std::numeric_limits<T>::infinity();
    target_logit[static_cast<size_t>(n)] = holds(targets[n]) ? x[targets[n] - first] : T(0);
  }
  if (max_over) max_over(mx.data(), N);
  if (sum_over) sum_over(target_logit.data(), N);
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    T* x = logits_inout + n * v_size;
    const T m = mx[static_cast<size_t>(n)];
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < real; ++v) {
      const T e = detail::vexp<T>(x[v] - m);
      x[v] = e;
      s += e;
    }
    sum[static_cast<size_t>(n)] = s;
  }
  if (sum_over) sum_over(sum.data(), N);
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    T* x = logits_inout + n * v_size;
    const int32_t target = targets[n];
    if (target == ignore_index) {
#pragma omp simd
      for (int v = 0; v < V; ++v) x[v] = 0;
      losses[n] = 0;
      continue;
    }
    const size_t i = static_cast<size_t>(n);
    losses[n] = (mx[i] - target_logit[i]) + std::log(sum[i]);
    const T k = grad_scale / sum[i];
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] *= k;
    for (int v = real; v < V; ++v) x[v] = 0;
    if (holds(target)) x[target - first] -= grad_scale;
  }
  double total = 0;
  for (int n = 0; n < N; ++n) total += static_cast<double>(losses[n]);
  return total;
}

template double vocab_parallel_cross_entropy<float>(float*, float*, const int32_t*, int, int, int, int, int, int,
                                                    float, const RowReduce<float>&, const RowReduce<float>&);
template double vocab_parallel_cross_entropy<double>(double*, double*, const int32_t*, int, int, int, int, int, int,
                                                     double, const RowReduce<double>&, const RowReduce<double>&);
template double cross_entropy_forward<float>(float*, const float*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward_backward<float>(float*, float*, const int32_t*, int, int, int, float);
template double cross_entropy_forward_backward<double>(double*, double*, const int32_t*, int, int, int, double);

}  // namespace tessera::kernels
