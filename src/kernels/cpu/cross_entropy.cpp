#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
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
compute_t<T> row_max(const T* x, int V) {
  compute_t<T> mx = -std::numeric_limits<compute_t<T>>::infinity();
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; ++v) mx = load(x[v]) > mx ? load(x[v]) : mx;
  return mx;
}

// The sum, in double, of exp(x - mx) over x[0, n), leaving x as it is: a chunk's exponentials go to
// a buffer first, since GCC vectorizes neither the exponential nor the widening sum in one loop.
template <class T>
double sum_of_exponentials(const T* x, int n, compute_t<T> mx) {
  using F = compute_t<T>;
  constexpr int kChunk = 512;
  F e[kChunk];
  double sum = 0;
  for (int first = 0; first < n; first += kChunk) {
    const int count = std::min(kChunk, n - first);
#pragma omp simd
    for (int i = 0; i < count; ++i) e[i] = detail::vexp<F>(load(x[first + i]) - mx);
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < count; ++i) sum += static_cast<double>(e[i]);
  }
  return sum;
}

// The sum of exp(x - mx) over x[0, real). In float and double x becomes those exponentials in
// place; 16-bit logits stay as they are (see row_gradient). Summed in double: a float sum over a
// vocabulary, in as many partial sums as the CPU's vectors have lanes, is off by a number of ulps
// that depends on the vector width (11 measured with AVX2 on a row of 333), and every
// probability of the row carries it; the double sum, rounded once, carries half an ulp.
//
// Float and double take two passes, the exponentials and then their sum, both in L2: in one loop
// GCC vectorizes neither the exponential nor the widening sum, and the row's exponentials ran one
// lane at a time (3 to 4 times slower on a GPT-2 vocabulary of 50257).
template <class T>
compute_t<T> exp_and_sum(T* x, int real, compute_t<T> mx) {
  using F = compute_t<T>;
  double sum = 0;
  if constexpr (is_half_v<T>) {
    sum = sum_of_exponentials(x, real, mx);  // the logits stay: row_gradient takes them again
  } else {
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] = detail::vexp<F>(x[v] - mx);
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < real; ++v) sum += static_cast<double>(x[v]);
  }
  return static_cast<F>(sum);
}

// The row's gradient: (softmax - onehot) · grad_scale over x[0, real), zero in the padding
// [real, V); target_column < 0 when the target lies in another rank's block. Float and double
// scale the exponentials exp_and_sum left; 16-bit rows still hold the logits and take their
// exponentials again, so that each gradient is rounded to T once (the target's included).
template <class T>
void row_gradient(T* x, int V, int real, compute_t<T> mx, compute_t<T> sum, compute_t<T> grad_scale,
                  int target_column) {
  using F = compute_t<T>;
  const F k = grad_scale / sum;
  if constexpr (is_half_v<T>) {
    const F target = target_column >= 0 ? detail::vexp<F>(load(x[target_column]) - mx) * k - grad_scale : F(0);
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] = store<T>(detail::vexp<F>(load(x[v]) - mx) * k);
    for (int v = real; v < V; ++v) x[v] = store<T>(0);
    if (target_column >= 0) x[target_column] = store<T>(target);
  } else {
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] *= k;
    for (int v = real; v < V; ++v) x[v] = 0;
    if (target_column >= 0) x[target_column] -= grad_scale;
  }
}
}  // namespace

template <class T>
double cross_entropy_forward(compute_t<T>* losses, const T* logits, const int32_t* targets, int N, int V,
                             int ignore_index, int64_t* count) {
  using F = compute_t<T>;
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
    const F mx = row_max(x, V);
    const double sum = sum_of_exponentials(x, V, mx);  // in double, as exp_and_sum's
    losses[n] = (mx - load(x[targets[n]])) + std::log(static_cast<F>(sum));
  }
  if (count != nullptr) *count = valid;
  // Summed serially so the total does not depend on the thread count.
  double total = 0;
  for (int n = 0; n < N; ++n) total += static_cast<double>(losses[n]);
  return valid > 0 ? total / static_cast<double>(valid) : 0.0;
}

template <class T>
double cross_entropy_forward_backward(T* logits_inout, compute_t<T>* losses, const int32_t* targets, int N, int V,
                                      int ignore_index, compute_t<T> grad_scale) {
  TS_CHECK(N >= 0 && V > 0, "cross_entropy_forward_backward: bad shape N={} V={}", N, V);
  return vocab_parallel_cross_entropy<T>(logits_inout, losses, targets, N, V, V, 0, V, ignore_index, grad_scale, {}, {});
}

template <class T>
double vocab_parallel_cross_entropy(T* logits_inout, compute_t<T>* losses, const int32_t* targets, int N, int V,
                                    int real, int first, int vocab, int ignore_index, compute_t<T> grad_scale,
                                    const RowReduce<compute_t<T>>& max_over, const RowReduce<compute_t<T>>& sum_over) {
  using F = compute_t<T>;
  TS_CHECK(N >= 0 && V > 0 && real >= 0 && real <= V && first >= 0 && vocab > 0,
           "vocab_parallel_cross_entropy: bad shape N={} V={} real={} first={} vocab={}", N, V, real, first, vocab);
  check_targets(targets, N, vocab, ignore_index);
  const size_t v_size = static_cast<size_t>(V);
  const size_t n_size = static_cast<size_t>(N);
  const bool parallel = detail::worth_parallel(n_size * v_size);
  // Per row: the maximum, then the target's logit, then the sum of exponentials, each combined
  // over the ranks before the next pass needs it.
  auto holds = [&](int32_t t) { return t != ignore_index && t >= first && t < first + real; };
  auto ignored_row = [&](int n) {
    T* x = logits_inout + n * v_size;
#pragma omp simd
    for (int v = 0; v < V; ++v) x[v] = store<T>(0);
    losses[n] = 0;
  };
  if (!max_over && !sum_over) {
    // The whole vocabulary here: each row's three passes (max, exp and sum, scale) while it stays in L2.
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; ++n) {
      const int32_t target = targets[n];
      if (target == ignore_index) {
        ignored_row(n);
        continue;
      }
      T* x = logits_inout + n * v_size;
      const F mx = real > 0 ? row_max(x, real) : -std::numeric_limits<F>::infinity();
      const F x_target = holds(target) ? load(x[target - first]) : F(0);
      const F sum = exp_and_sum(x, real, mx);
      losses[n] = (mx - x_target) + std::log(sum);
      row_gradient(x, V, real, mx, sum, grad_scale, holds(target) ? target - first : -1);
    }
  } else {
    // Split over ranks: each per-row value combined over them before the next pass needs it.
    std::vector<F> mx(n_size), target_logit(n_size), sum(n_size);
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; ++n) {
      const T* x = logits_inout + n * v_size;
      mx[static_cast<size_t>(n)] = real > 0 ? row_max(x, real) : -std::numeric_limits<F>::infinity();
      target_logit[static_cast<size_t>(n)] = holds(targets[n]) ? load(x[targets[n] - first]) : F(0);
    }
    if (max_over) max_over(mx.data(), N);
    if (sum_over) sum_over(target_logit.data(), N);
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; ++n) {
      sum[static_cast<size_t>(n)] = exp_and_sum(logits_inout + n * v_size, real, mx[static_cast<size_t>(n)]);
    }
    if (sum_over) sum_over(sum.data(), N);
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; ++n) {
      const int32_t target = targets[n];
      if (target == ignore_index) {
        ignored_row(n);
        continue;
      }
      const size_t i = static_cast<size_t>(n);
      losses[n] = (mx[i] - target_logit[i]) + std::log(sum[i]);
      row_gradient(logits_inout + n * v_size, V, real, mx[i], sum[i], grad_scale,
                   holds(target) ? target - first : -1);
    }
  }
  double total = 0;
  for (int n = 0; n < N; ++n) total += static_cast<double>(losses[n]);
  return total;
}

template double vocab_parallel_cross_entropy<float>(float*, float*, const int32_t*, int, int, int, int, int, int,
                                                    float, const RowReduce<float>&, const RowReduce<float>&);
template double vocab_parallel_cross_entropy<double>(double*, double*, const int32_t*, int, int, int, int, int, int,
                                                     double, const RowReduce<double>&, const RowReduce<double>&);
template double vocab_parallel_cross_entropy<bf16>(bf16*, float*, const int32_t*, int, int, int, int, int, int, float,
                                                   const RowReduce<float>&, const RowReduce<float>&);
template double vocab_parallel_cross_entropy<f16>(f16*, float*, const int32_t*, int, int, int, int, int, int, float,
                                                  const RowReduce<float>&, const RowReduce<float>&);
template double cross_entropy_forward<float>(float*, const float*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward<bf16>(float*, const bf16*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward<f16>(float*, const f16*, const int32_t*, int, int, int, int64_t*);
template double cross_entropy_forward_backward<float>(float*, float*, const int32_t*, int, int, int, float);
template double cross_entropy_forward_backward<double>(double*, double*, const int32_t*, int, int, int, double);
template double cross_entropy_forward_backward<bf16>(bf16*, float*, const int32_t*, int, int, int, float);
template double cross_entropy_forward_backward<f16>(f16*, float*, const int32_t*, int, int, int, float);

}  // namespace tessera::kernels
