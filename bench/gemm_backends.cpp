// OpenBLAS's sgemm against oneDNN's on the products a training step of the default model makes
// (512 tokens of width 256, MLP 1024, vocabulary 2048: forward, input gradient, weight gradient),
// interleaved so that both see the same machine: the evidence for which library the float matmul
// calls (kernels/cpu/matmul.cpp).
//
//   OMP_NUM_THREADS=1 gemm_backends [--reps 15]
//
// OpenBLAS 0.3.21's speed at one thread depends on the process's history: on an AMD EPYC of the
// first Zen generation its products with 256 or fewer output columns ran at 8-10 GFLOP/s until the
// process had once made a product at least 384 columns wide, and at 33-35 after. tessera's matmul
// cuts every product into blocks of at most 256 columns or rows (kernels/cpu/matmul.cpp), so a
// training rank never leaves the slow state. The benchmark therefore times the narrow products
// first ("fresh"), then makes one wide product and times every product again ("after a wide
// product"); run it as a fresh process with the thread count a rank has (OMP_NUM_THREADS).
//
// Prints a table and, per shape and state,
//   RESULT gemm_backends shape=MxNxK threads=T state=fresh|after_wide openblas_gflops=X onednn_gflops=Y ratio=Y/X
// (medians of the repetitions).
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "core/rng.h"

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  int M, N, K;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  CLI::App app{"OpenBLAS against oneDNN sgemm on the default model's products"};
  app.add_option("--reps", reps, "timed repetitions of each (the median counts)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // out[M,N] = a[M,K] · b[K,N] for each linear layer's forward (tokens x out x in), input gradient
  // (tokens x in x out) and weight gradient (in x out x tokens).
  const std::array<Shape, 9> shapes{{{512, 768, 256},
                                     {512, 256, 256},
                                     {512, 1024, 256},
                                     {512, 256, 1024},
                                     {512, 2048, 256},
                                     {512, 256, 768},
                                     {256, 256, 512},
                                     {1024, 256, 512},
                                     {256, 768, 512}}};
  const int threads = omp_get_max_threads();
  openblas_set_num_threads(threads);
  fmt::print("{:>16} {:>8} {:>20} {:>16} {:>16} {:>8}\n", "M x N x K", "threads", "state", "OpenBLAS GFLOP/s",
             "oneDNN GFLOP/s", "ratio");
  auto compare = [&](const Shape& s, const char* state) {
    const size_t ak = static_cast<size_t>(s.M) * s.K, bk = static_cast<size_t>(s.K) * s.N;
    std::vector<float> a(ak), b(bk), c(static_cast<size_t>(s.M) * s.N);
    for (size_t i = 0; i < ak; ++i) a[i] = tessera::uniform(1, 1, i) - 0.5f;
    for (size_t i = 0; i < bk; ++i) b[i] = tessera::uniform(1, 2, i) - 0.5f;
    auto openblas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.N, 0.0f,
                  c.data(), s.N);
      return true;
    };
    auto onednn = [&] {
      return dnnl_sgemm('N', 'N', s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.N, 0.0f, c.data(), s.N) ==
             dnnl_success;
    };
    auto gflops = [&](auto&& run) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!run()) throw std::runtime_error(fmt::format("oneDNN's sgemm failed at {} x {} x {}", s.M, s.N, s.K));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return 2.0 * s.M * s.N * static_cast<double>(s.K) / seconds / 1e9;
    };
    gflops(openblas);  // warm up: page faults, oneDNN's generated kernels
    gflops(onednn);
    std::vector<double> blas_runs, dnnl_runs;
    for (int r = 0; r < reps; ++r) {
      blas_runs.push_back(gflops(openblas));
      dnnl_runs.push_back(gflops(onednn));
    }
    const double x = median(blas_runs), y = median(dnnl_runs);
    fmt::print("{:>16} {:>8} {:>20} {:>16.1f} {:>16.1f} {:>8.2f}\n", fmt::format("{}x{}x{}", s.M, s.N, s.K), threads,
               state, x, y, y / x);
    fmt::print("RESULT gemm_backends shape={}x{}x{} threads={} state={} openblas_gflops={:.1f} onednn_gflops={:.1f} "
               "ratio={:.2f}\n",
               s.M, s.N, s.K, threads, state[0] == 'f' ? "fresh" : "after_wide", x, y, y / x);
  };
  for (const Shape& s : shapes) {
    if (s.N <= 256) compare(s, "fresh");
  }
  for (const Shape& s : shapes) compare(s, "after a wide product");
  return 0;
}
