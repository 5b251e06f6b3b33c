// Microbenchmark of the CPU kernels at GPT-2 small sizes: GEMM throughput against the sgemm
// ceiling, attention (tiled vs naive), and the bandwidth of the elementwise and row kernels.
// Prints a table and writes JSON (path argument, default kernels_bench.json; --cpu-time: see
// time_median). Not built by default;
// from the source root, with <build> a build folder that has built tessera_kernels:
//   g++ -std=c++20 -O3 -march=native -fopenmp -Isrc bench/kernels_bench.cpp
//       <build>/src/kernels/libtessera_kernels.a <build>/src/core/libtessera_core.a
//       -I/usr/include/x86_64-linux-gnu/openblas-openmp -L/usr/lib/x86_64-linux-gnu/openblas-openmp
//       -lopenblas -lfmt -o kernels_bench
//   OMP_NUM_THREADS=2 ./kernels_bench
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/softmax.h"

namespace {

using namespace tessera;
using namespace tessera::kernels;

// Median of `reps` timed runs after one warm-up, in seconds. With --cpu-time, process CPU time
// divided by the thread count: on a machine shared with other jobs this still measures the
// kernel's own efficiency, where wall time measures the neighbours.
bool g_cpu_time = false;

double time_median(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    const std::clock_t c = std::clock();
    fn();
    if (g_cpu_time) {
      t.push_back(double(std::clock() - c) / CLOCKS_PER_SEC / omp_get_max_threads());
    } else {
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> randn(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) v[i] = scale * normal(1, stream, i);
  return v;
}

struct Row {
  std::string name;
  double seconds;
  double gflops;  // 0 when not a flop-bound kernel
  double gbytes;  // bytes moved / s, 0 when not memory-bound
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "kernels_bench.json";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cpu-time") {
      g_cpu_time = true;
    } else {
      json_path = argv[i];
    }
  }
  const int threads = omp_get_max_threads();
  std::vector<Row> rows;
  auto report = [&](const std::string& name, double s, double flops, double bytes) {
    rows.push_back({name, s, flops > 0 ? flops / s * 1e-9 : 0.0, bytes > 0 ? bytes / s * 1e-9 : 0.0});
    std::printf("%-44s %9.3f ms %9.1f GFLOP/s %8.1f GB/s\n", name.c_str(), s * 1e3, rows.back().gflops,
                rows.back().gbytes);
  };

  // The ceiling: a large square sgemm on all threads.
  {
    const int n = 1536;
    auto a = randn(size_t(n) * n, 1), b = randn(size_t(n) * n, 2);
    std::vector<float> c(size_t(n) * n);
    const double s = time_median(
        [&] { matmul<float>(c.data(), a.data(), b.data(), nullptr, n, n, n, Transpose::No, Transpose::No, false); }, 5);
    report("sgemm 1536^3 (ceiling)", s, 2.0 * n * n * n, 0);
  }

  // GPT-2 small shapes: B*T = 4096 rows, C = 768.
  const int B = 4, T = 1024, C = 768, H = 12, V = 50257;
  const size_t N = size_t(B) * T;
  {
    auto x = randn(N * C, 3), w = randn(size_t(3 * C) * C, 4, 0.02f);
    std::vector<float> y(N * 3 * C), dx(N * C), dw(size_t(3 * C) * C);
    report("linear fwd qkv 4096x768 -> 2304",
           time_median(
               [&] {
                 matmul<float>(y.data(), x.data(), w.data(), nullptr, int(N), 3 * C, C, Transpose::No, Transpose::Yes,
                               false);
               },
               5),
           2.0 * N * C * 3 * C, 0);
    report("linear bwd dweight (A^T B)",
           time_median(
               [&] {
                 matmul<float>(dw.data(), y.data(), x.data(), nullptr, 3 * C, C, int(N), Transpose::Yes, Transpose::No,
                               true);
               },
               5),
           2.0 * N * C * 3 * C, 0);
  }

  // Is BLAS single-threaded inside a parallel region? Same 768^3 sgemm: outside on all threads,
  // outside on one thread, and inside an active region from one thread of the team.
  {
    const int n = 768;
    auto a = randn(size_t(n) * n, 5), b = randn(size_t(n) * n, 6);
    std::vector<float> c(size_t(n) * n);
    auto run = [&] {
      gemm<float>(Transpose::No, Transpose::No, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    };
    const double flops = 2.0 * n * n * n;
    report("sgemm 768^3 outside a region", time_median(run, 7), flops, 0);
    omp_set_num_threads(1);
    report("sgemm 768^3 outside, 1 thread", time_median(run, 7), flops, 0);
    omp_set_num_threads(threads);
    report("sgemm 768^3 inside a region (thread 0)",
           time_median(
               [&] {
#pragma omp parallel
                 {
                   if (omp_get_thread_num() == 0) run();
                 }
               },
               7),
           flops, 0);
  }

  // Attention: tiled forward/backward at T = 1024, naive at T = 256 for comparison.
  {
    auto qkv = randn(N * 3 * C, 7), dout = randn(N * C, 8);
    std::vector<float> out(N * C), lse(size_t(B) * H * T), dqkv(N * 3 * C);
    const int D = C / H;
    const double causal = double(B) * H * D * T * (T + 1) / 2.0;  // multiply-adds of one causal product
    report("attention fwd tiled B4 T1024 C768 H12",
           time_median([&] { attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H, H); }, 5), 4.0 * causal, 0);
    report(
        "attention bwd tiled B4 T1024 C768 H12",
        time_median(
            [&] { attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H, H); }, 5),
        10.0 * causal, 0);
    const int Tn = 256;
    const double causal_n = double(B) * H * D * Tn * (Tn + 1) / 2.0;
    std::vector<float> att(size_t(B) * H * Tn * Tn), out_n(size_t(B) * Tn * C), dqkv_n(size_t(B) * Tn * 3 * C);
    report("attention fwd naive B4 T256",
           time_median([&] { attention_forward_naive(out_n.data(), att.data(), qkv.data(), B, Tn, C, H, H); }, 3),
           4.0 * causal_n, 0);
    report("attention fwd tiled B4 T256",
           time_median([&] { attention_forward(out_n.data(), lse.data(), qkv.data(), B, Tn, C, H, H); }, 5),
           4.0 * causal_n, 0);
    report("attention bwd naive B4 T256",
           time_median(
               [&] { attention_backward_naive(dqkv_n.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, H, H); }, 3),
           10.0 * causal_n, 0);
  }

  // Memory-bound kernels: bytes are the compulsory traffic (each array read or written once).
  {
    auto x = randn(N * C, 9), dy = randn(N * C, 10), w = randn(size_t(C), 11);
    std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
    const double nc = double(N) * C * sizeof(float);
    report("layernorm fwd 4096x768",
           time_median(
               [&] {
                 layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), int(N), C, 1e-5f);
               },
               9),
           0, 2 * nc);
    report("layernorm bwd 4096x768",
           time_median(
               [&] {
                 layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                    rstd.data(), int(N), C);
               },
               9),
           0, 3 * nc);
    auto h = randn(N * 4 * C, 12);
    std::vector<float> g(N * 4 * C), dh(N * 4 * C);
    report("gelu fwd 4096x3072", time_median([&] { gelu_forward(g.data(), h.data(), h.size()); }, 9), 0,
           8.0 * h.size());
    report("gelu bwd 4096x3072", time_median([&] { gelu_backward(dh.data(), h.data(), g.data(), h.size()); }, 9), 0,
           12.0 * h.size());
    report("softmax fwd 4096x768", time_median([&] { softmax_forward(y.data(), x.data(), int(N), C); }, 9), 0, 2 * nc);
  }
  {
    const int rows_ce = 1024;
    auto logits = randn(size_t(rows_ce) * V, 13);
    std::vector<float> work(logits.size()), losses(rows_ce);
    std::vector<int32_t> targets(rows_ce);
    for (int i = 0; i < rows_ce; ++i) targets[i] = (i * 7919) % V;
    report("cross-entropy fwd+bwd 1024x50257",
           time_median(
               [&] {
                 std::copy(logits.begin(), logits.end(), work.begin());
                 cross_entropy_forward_backward(work.data(), losses.data(), targets.data(), rows_ce, V, -100, 1.0f);
               },
               5),
           0, 4.0 * 2 * logits.size());
  }
  {
    const size_t n = size_t(1) << 24;
    auto p = randn(n, 14), g = randn(n, 15, 0.01f);
    std::vector<float> m(n), v(n);
    int64_t step = 0;
    report(
        "adamw 16M params",
        time_median(
            [&] { adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step); },
            7),
        0, 7.0 * 4 * n);
  }

  FILE* f = std::fopen(json_path.c_str(), "w");
  if (f != nullptr) {
    std::fprintf(f, "{\n  \"threads\": %d,\n  \"clock\": \"%s\",\n  \"rows\": [\n", threads,
                 g_cpu_time ? "cpu" : "wall");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::fprintf(f, "    {\"name\": \"%s\", \"seconds\": %.6g, \"gflops\": %.4g, \"gbytes_per_s\": %.4g}%s\n",
                   rows[i].name.c_str(), rows[i].seconds, rows[i].gflops, rows[i].gbytes,
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
