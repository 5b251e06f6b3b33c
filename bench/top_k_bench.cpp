// Top-k gradient compression's selection (kernels/cpu/top_k_select.h) against the comparison
// selection it replaced (std::nth_element over an index vector under |x| descending, index
// ascending), on gradient-like values: the time a compressed reduction spends choosing what to
// send, per element, before anything crosses the link. Both must pick the same indices; the bench
// checks that too.
//   build/release/bench/top_k_bench [elements] [ratio] [repetitions]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/top_k_select.h"

namespace {

double median_seconds(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<int32_t> by_comparison(const std::vector<float>& x, int64_t k) {
  std::vector<int32_t> index(x.size());
  std::iota(index.begin(), index.end(), 0);
  const auto larger = [&](int32_t a, int32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(index.begin(), index.begin() + (k - 1), index.end(), larger);
  index.resize(static_cast<size_t>(k));
  std::sort(index.begin(), index.end());
  return index;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{1} << 24;
  const double ratio = argc > 2 ? std::atof(argv[2]) : 0.01;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  const auto k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n))));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 0);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * std::ldexp(1.0f, exponent(rng));
  std::vector<int32_t> radix, comparison;
  const double t_radix = median_seconds([&] { radix = tessera::kernels::top_k_magnitude_indices(x, k); }, reps);
  const double t_comparison = median_seconds([&] { comparison = by_comparison(x, k); }, reps);
  std::printf("%zu elements, k %lld, median of %d\n", n, static_cast<long long>(k), reps);
  std::printf("radix selection      %9.2f ms  %6.2f ns/element\n", t_radix * 1e3, t_radix * 1e9 / static_cast<double>(n));
  std::printf("nth_element          %9.2f ms  %6.2f ns/element\n", t_comparison * 1e3,
              t_comparison * 1e9 / static_cast<double>(n));
  std::printf("RESULT top_k_select elements=%zu speedup=%.2f same=%d\n", n, t_comparison / t_radix,
              radix == comparison ? 1 : 0);
  return radix == comparison ? 0 : 1;
}
