// The practical compute ceiling of this CPU: OpenBLAS sgemm GFLOP/s on square matrices, n from
// 1024 to 2048, best of several repetitions. Model FLOP utilization (MFU) is reported against it.
//
//   sgemm_ceiling [--threads 2] [--reps 5]
//
// Prints a table and, last, one JSON line {"bench": "sgemm_ceiling", ..., "gflops": best}.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/rng.h"

extern "C" void openblas_set_num_threads(int);

int main(int argc, char** argv) {
  int threads = 2;
  int reps = 5;
  CLI::App app{"OpenBLAS sgemm GFLOP/s: the compute ceiling MFU is measured against"};
  app.add_option("--threads", threads, "threads for OpenBLAS and OpenMP")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions per size (the best counts)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  std::string sizes_json;
  double best_overall = 0.0;
  fmt::print("{:>6} {:>12} {:>12}\n", "n", "best GFLOP/s", "median");
  for (int n : {1024, 1536, 2048}) {
    const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
    std::vector<float> a(nn), b(nn), c(nn, 0.0f);
    for (size_t i = 0; i < nn; ++i) {
      a[i] = tessera::uniform(1, 1, i) - 0.5f;
      b[i] = tessera::uniform(1, 2, i) - 0.5f;
    }
    auto run = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    };
    run();  // warm up: thread pool start, page faults
    std::vector<double> gflops;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      run();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      gflops.push_back(2.0 * n * static_cast<double>(n) * n / s / 1e9);
    }
    std::sort(gflops.begin(), gflops.end());
    double best = gflops.back();
    best_overall = std::max(best_overall, best);
    fmt::print("{:>6} {:>12.1f} {:>12.1f}\n", n, best, gflops[gflops.size() / 2]);
    sizes_json += fmt::format("{}\"{}\": {:.1f}", sizes_json.empty() ? "" : ", ", n, best);
  }
  fmt::print("{{\"bench\": \"sgemm_ceiling\", \"threads\": {}, \"reps\": {}, \"by_n\": {{{}}}, \"gflops\": {:.1f}}}\n",
             threads, reps, sizes_json, best_overall);
  return 0;
}
