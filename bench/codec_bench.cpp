// Throughput of the activation encodings' kernels (kernels/cpu/activation_codec.h and the bf16
// conversions of core/dtype.h) on a tensor the size of the demo's MLP activations (16 × 128 × 1024
// f32, 8 MiB), in GB/s of the dense tensor: what Gist's encode after a forward and decode before a
// backward cost beside the step. The sparse form is timed at the squared ReLU's density by step 120
// (28 % non-zero) and at one where it barely pays, on the portable kernels and, where the CPU has
// them, the AVX-512 ones.
//   build/release/bench/codec_bench [elements] [repetitions]
//   OMP_NUM_THREADS=1 build/release/bench/codec_bench
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/activation_codec.h"

namespace {

using namespace tessera;
namespace tk = tessera::kernels;

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

std::vector<float> activations(size_t n, double nonzero_fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::uniform_real_distribution<double> p(0.0, 1.0);
  std::vector<float> v(n);
  for (float& x : v) x = p(rng) < nonzero_fraction ? u(rng) : 0.0f;
  return v;
}

void report(const char* what, size_t dense_bytes, double seconds) {
  std::printf("%-34s %8.3f ms %8.2f GB/s\n", what, seconds * 1e3, static_cast<double>(dense_bytes) / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{16} * 128 * 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 31;
  const size_t dense = n * sizeof(float);
  std::printf("%zu f32 elements (%.1f MiB), %d threads, median of %d\n", n, static_cast<double>(dense) / (1 << 20),
              omp_get_max_threads(), reps);

  const std::vector<float> values = activations(n, 1.0, 1);
  std::vector<bf16> half(n);
  std::vector<float> back(n);
  report("f32 -> bf16", dense, median_seconds([&] { convert_f32_to_bf16(half.data(), values.data(), n); }, reps));
  report("bf16 -> f32", dense, median_seconds([&] { convert_bf16_to_f32(back.data(), half.data(), n); }, reps));

  std::vector<uint8_t> bitmap(tk::sign_bytes(n));
  std::vector<float> packed(n + 1);
  for (const tk::SparseKernels kernels : {tk::SparseKernels::Portable, tk::SparseKernels::Avx512}) {
    if (kernels == tk::SparseKernels::Avx512 && tk::detect_sparse_kernels() != kernels) continue;
    const char* name = kernels == tk::SparseKernels::Avx512 ? "avx512" : "portable";
    for (const double density : {0.28, 0.45}) {
      const std::vector<float> sparse = activations(n, density, 2);
      char label[64];
      std::snprintf(label, sizeof label, "sparse encode %s (%.0f%%)", name, density * 100);
      report(label, dense, median_seconds([&] {
        tk::sparse_encode(bitmap.data(), packed.data(), sparse.data(), n, 4, kernels);
      }, reps));
      std::snprintf(label, sizeof label, "sparse decode %s (%.0f%%)", name, density * 100);
      report(label, dense, median_seconds([&] {
        tk::sparse_decode(back.data(), bitmap.data(), packed.data(), n, 4, kernels);
      }, reps));
    }
  }
  {
    // Deciding on the sparse form reads a sparse tensor to its end.
    const std::vector<float> sparse = activations(n, 0.28, 2);
    report("count until (28% non-zero)", dense, median_seconds([&] {
      tk::count_nonzero_until(sparse.data(), n, 4, n / 2);
    }, reps));
  }

  std::vector<uint8_t> codes(n);
  std::vector<float> scales(tk::fp8_blocks(n));
  report("fp8 encode", dense, median_seconds([&] { tk::fp8_encode(codes.data(), scales.data(), values.data(), n); },
                                             reps));
  report("fp8 decode", dense, median_seconds([&] { tk::fp8_decode(back.data(), codes.data(), scales.data(), n); },
                                             reps));
  return 0;
}
