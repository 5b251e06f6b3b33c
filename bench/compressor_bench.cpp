// The compressors' own compute, against the code each kernel replaced, on gradient-like values:
// what a compressed reduction spends before anything crosses the link.
// - Top-k's selection (kernels/cpu/top_k_select.h) against std::nth_element over an index vector
//   under |x| descending, index ascending. Both must pick the same indices; the bench checks it.
// - PowerSGD's products at rank 4 on one MLP matrix of GPT-2 124M (3072 x 768;
//   kernels/cpu/low_rank.h) against the loops that updated P and Q in memory.
// - 1-bit compression and its decompression (kernels/cpu/sign_compression.h, what 1-bit Adam runs over
//   the whole momentum every step) against the element-at-a-time loops they replaced. Both must
//   give the same bits, scales and errors; the bench checks it.
//   build/release/bench/compressor_bench [elements] [ratio] [repetitions]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/low_rank.h"
#include "kernels/cpu/sign_compression.h"
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

// The loops PowerSGD ran before kernels/cpu/low_rank.h: P = M Q, Q = Mt P and the reconstruction,
// each output updated in memory once per element of M.
void products_in_memory(std::vector<float>& m, std::vector<float>& error, const std::vector<float>& q0, int64_t rows,
                        int64_t cols, int64_t rank, std::vector<float>& p, std::vector<float>& q) {
  std::fill(p.begin(), p.end(), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t k = 0; k < rank; ++k) p[i * rank + k] += m[i * cols + j] * q0[j * rank + k];
  std::fill(q.begin(), q.end(), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t k = 0; k < rank; ++k) q[j * rank + k] += m[i * cols + j] * p[i * rank + k];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float approx = 0;
      for (int64_t k = 0; k < rank; ++k) approx += p[i * rank + k] * q[j * rank + k];
      error[i * cols + j] = m[i * cols + j] - approx / 2;
      m[i * cols + j] = approx;
    }
  }
}

void products_by_kernels(std::vector<float>& m, std::vector<float>& error, const std::vector<float>& q0, int64_t rows,
                         int64_t cols, int64_t rank, std::vector<float>& p, std::vector<float>& q) {
  tessera::kernels::low_rank_project(m.data(), rows, cols, q0.data(), rank, rank, p.data());
  tessera::kernels::low_rank_project_transposed(m.data(), rows, cols, p.data(), rank, q.data());
  tessera::kernels::low_rank_reconstruct(m.data(), error.data(), rows, cols, p.data(), q.data(), rank, 2.0f);
}

// The loops 1-bit compression ran before it was written to vectorize: a bit set and an error
// updated per element, the block's magnitude summed in order.
void sign_compress_by_element(std::span<float> acc, uint8_t* bits, float* scales) {
  using tessera::kernels::kSignBlock;
  const size_t n = acc.size();
  std::fill(bits, bits + tessera::kernels::sign_bits_bytes(n), uint8_t{0});
  for (size_t blk = 0; blk < tessera::kernels::sign_blocks(n); ++blk) {
    const size_t lo = blk * kSignBlock, hi = std::min(n, lo + kSignBlock);
    double magnitude = 0;
    for (size_t i = lo; i < hi; ++i) magnitude += std::fabs(acc[i]);
    const float scale = static_cast<float>(magnitude / static_cast<double>(hi - lo));
    scales[blk] = scale;
    for (size_t i = lo; i < hi; ++i) {
      const bool positive = acc[i] >= 0;
      if (positive) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      acc[i] -= positive ? scale : -scale;
    }
  }
}

void add_sign_decompressed_by_element(std::span<float> out, const uint8_t* bits, const float* scales, float weight) {
  for (size_t i = 0; i < out.size(); ++i) {
    const float scale = weight * scales[i / tessera::kernels::kSignBlock];
    out[i] += (bits[i / 8] >> (i % 8) & 1u) ? scale : -scale;
  }
}

// Times both ways of compressing and decompressing x (n elements, not a multiple of a block, so
// the last block ends inside a byte) and says whether they agree bit for bit.
bool sign_compression(const std::vector<float>& x, int reps) {
  namespace k = tessera::kernels;
  const size_t n = x.size() - 3;
  std::vector<float> acc_old, acc_new, out_old(n, 0.5f), out_new(n, 0.5f);
  std::vector<uint8_t> bits_old(k::sign_bits_bytes(n)), bits_new(bits_old.size());
  std::vector<float> scales_old(k::sign_blocks(n)), scales_new(scales_old.size());
  const double t_old = median_seconds([&] {
    acc_old.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    sign_compress_by_element(acc_old, bits_old.data(), scales_old.data());
  }, reps);
  const double t_new = median_seconds([&] {
    acc_new.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    k::sign_compress(acc_new, bits_new.data(), scales_new.data());
  }, reps);
  // As often each, so that both outputs hold the same sums.
  const double t_add_old =
      median_seconds([&] { add_sign_decompressed_by_element(out_old, bits_old.data(), scales_old.data(), 0.5f); }, reps);
  const double t_add_new =
      median_seconds([&] { k::add_sign_decompressed(out_new, bits_new.data(), scales_new.data(), 0.5f); }, reps);
  const bool same = acc_old == acc_new && bits_old == bits_new && scales_old == scales_new && out_old == out_new;
  std::printf("1-bit compression of %zu: kernel %.2f ms, by element %.2f ms; decompression %.2f ms, by element %.2f ms\n",
              n, t_new * 1e3, t_old * 1e3, t_add_new * 1e3, t_add_old * 1e3);
  std::printf("RESULT sign_compression elements=%zu speedup=%.2f decompress_speedup=%.2f same=%d\n", n, t_old / t_new,
              t_add_old / t_add_new, same ? 1 : 0);
  return same;
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

  const int64_t rows = 3072, cols = 768, rank = 4;
  std::vector<float> gradient(static_cast<size_t>(rows * cols)), q0(static_cast<size_t>(cols * rank));
  for (float& v : gradient) v = normal(rng);
  for (float& v : q0) v = normal(rng);
  std::vector<float> m, error(gradient.size()), p(static_cast<size_t>(rows * rank)), q(q0.size());
  const double t_memory = median_seconds([&] { m = gradient; products_in_memory(m, error, q0, rows, cols, rank, p, q); }, reps);
  const double t_kernels = median_seconds([&] { m = gradient; products_by_kernels(m, error, q0, rows, cols, rank, p, q); }, reps);
  std::printf("PowerSGD rank %lld on %lld x %lld: kernels %.2f ms, loops in memory %.2f ms\n",
              static_cast<long long>(rank), static_cast<long long>(rows), static_cast<long long>(cols), t_kernels * 1e3,
              t_memory * 1e3);
  std::printf("RESULT powersgd_products rows=%lld cols=%lld rank=%lld speedup=%.2f\n", static_cast<long long>(rows),
              static_cast<long long>(cols), static_cast<long long>(rank), t_memory / t_kernels);
  const bool signs_agree = sign_compression(x, reps);
  return radix == comparison && signs_agree ? 0 : 1;
}
