// The practical compute ceiling of this CPU, per precision: the best GEMM rate any library here
// reaches, measured on square matrices (n from 1024 to 2048) and, with --shape, on the model's
// main product, best of several repetitions. fp32: OpenBLAS's sgemm (with the core it loaded:
// OPENBLAS_CORETYPE chooses another) and oneDNN's; bf16: the bf16 x bf16 -> f32 matmul tessera's
// mixed precision runs (oneDNN's, or widened to f32 where the CPU has no bf16 dot products).
// Model FLOP utilization (MFU) is reported against the best of each precision.
//
//   sgemm_ceiling [--threads 2] [--reps 5] [--shape 1024x3072x768 ...]
//
// Prints a table and, last, one JSON line {"bench": "sgemm_ceiling", ..., "gflops": best fp32,
// "bf16_gflops": best bf16, "openblas_core": ..., "by_library": {...}}.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/gemm_bf16.h"

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  int M, N, K;
  std::string name() const { return fmt::format("{}x{}x{}", M, N, K); }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int reps = 5;
  std::vector<std::string> shape_texts;
  CLI::App app{"GEMM GFLOP/s per library and precision: the compute ceiling MFU is measured against"};
  app.add_option("--threads", threads, "threads for OpenBLAS, oneDNN and OpenMP")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions per size (the best counts)")->check(CLI::PositiveNumber);
  app.add_option("--shape", shape_texts, "the model's main product MxNxK, measured besides the square sizes (repeatable)");
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  std::vector<Shape> shapes{{1024, 1024, 1024}, {1536, 1536, 1536}, {2048, 2048, 2048}};
  for (const std::string& shape_text : shape_texts) {
    Shape s{};
    if (std::sscanf(shape_text.c_str(), "%dx%dx%d", &s.M, &s.N, &s.K) != 3 || s.M <= 0 || s.N <= 0 || s.K <= 0) {
      fmt::print(stderr, "sgemm_ceiling: --shape '{}' is not MxNxK with positive sizes\n", shape_text);
      return 2;
    }
    shapes.push_back(s);
  }
  const std::string core = tessera::kernels::openblas_core();
  tessera::kernels::Bf16Gemm bf16_gemm(tessera::kernels::detect_bf16_gemm_path());

  // library -> best GFLOP/s over every shape; "<library> <shape>" -> best at that shape.
  std::map<std::string, double> best;
  std::map<std::string, double> at_shape;
  fmt::print("{:>16} {:>20} {:>12} {:>12}\n", "M x N x K", "library", "best GFLOP/s", "median");
  for (const Shape& s : shapes) {
    const size_t ak = static_cast<size_t>(s.M) * s.K, bk = static_cast<size_t>(s.K) * s.N;
    std::vector<float> a(ak), b(bk), c(static_cast<size_t>(s.M) * s.N, 0.0f);
    for (size_t i = 0; i < ak; ++i) a[i] = tessera::uniform(1, 1, i) - 0.5f;
    for (size_t i = 0; i < bk; ++i) b[i] = tessera::uniform(1, 2, i) - 0.5f;
    std::vector<tessera::bf16> ah(ak), bh(bk);
    tessera::convert_f32_to_bf16(ah.data(), a.data(), ak);
    tessera::convert_f32_to_bf16(bh.data(), b.data(), bk);
    const std::vector<std::pair<std::string, std::function<void()>>> libraries{
        {"openblas-sgemm",
         [&] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.N,
                       0.0f, c.data(), s.N);
         }},
        {"onednn-sgemm",
         [&] {
           if (dnnl_sgemm('N', 'N', s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.N, 0.0f, c.data(), s.N) !=
               dnnl_success)
             throw std::runtime_error("oneDNN's sgemm failed");
         }},
        {"bf16-matmul",
         [&] {
           bf16_gemm.multiply(tessera::kernels::Transpose::No, tessera::kernels::Transpose::No, s.M, s.N, s.K,
                              ah.data(), s.K, bh.data(), s.N, c.data(), s.N, false);
         }},
    };
    for (const auto& [library, run] : libraries) {
      run();  // warm up: thread pool start, page faults, generated kernels
      std::vector<double> gflops;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gflops.push_back(2.0 * s.M * s.N * static_cast<double>(s.K) / seconds / 1e9);
      }
      std::sort(gflops.begin(), gflops.end());
      best[library] = std::max(best[library], gflops.back());
      at_shape[library + " " + s.name()] = gflops.back();
      fmt::print("{:>16} {:>20} {:>12.1f} {:>12.1f}\n", s.name(), library, gflops.back(), gflops[gflops.size() / 2]);
    }
  }
  const double f32 = std::max(best["openblas-sgemm"], best["onednn-sgemm"]);
  std::string by_library, by_shape;
  for (const auto& [k, v] : best) by_library += fmt::format("{}\"{}\": {:.1f}", by_library.empty() ? "" : ", ", k, v);
  for (const auto& [k, v] : at_shape) by_shape += fmt::format("{}\"{}\": {:.1f}", by_shape.empty() ? "" : ", ", k, v);
  fmt::print("OpenBLAS core {}; bf16 matmul {}\n", core, bf16_gemm.describe());
  fmt::print("{{\"bench\": \"sgemm_ceiling\", \"threads\": {}, \"reps\": {}, \"openblas\": \"{}\", \"openblas_core\": \"{}\", "
             "\"bf16_impl\": \"{}\", \"by_library\": {{{}}}, \"by_shape\": {{{}}}, \"gflops\": {:.1f}, "
             "\"bf16_gflops\": {:.1f}}}\n",
             threads, reps, tessera::kernels::openblas_config(), core, bf16_gemm.describe(), by_library,
             by_shape, f32, best["bf16-matmul"]);
  return 0;
}
