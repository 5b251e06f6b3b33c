#include "train/peak_flops.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/host.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/matmul.h"
#include "train/machine_cache.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

// The best rate of square sgemms of two sizes, repeated for about `seconds`.
double measure(double seconds) {
  double best = 0;
  for (int n : {1024, 1536}) {
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
    const auto start = std::chrono::steady_clock::now();
    do {
      const auto t0 = std::chrono::steady_clock::now();
      kernels::matmul(c.data(), a.data(), b.data(), static_cast<const float*>(nullptr), n, n, n,
                      kernels::Transpose::No, kernels::Transpose::No, false);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 2.0 * n * n * static_cast<double>(n) / dt);
    } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds / 2);
  }
  return best;
}

// Other processes' share of the cores above which a measurement does not stand for the machine.
constexpr double kQuietShare = 0.1;

}  // namespace

MatmulPeak matmul_peak(double configured_gflops, int threads) {
  if (configured_gflops > 0) return {configured_gflops * 1e9, "log.peak_gflops"};
  // The GEMM library is in the key (and OpenBLAS's core, which OPENBLAS_CORETYPE changes): a peak
  // stored for another is not this run's.
  const bool openblas = kernels::float_gemm_library() == kernels::FloatGemmLibrary::OpenBlas;
  const std::string key = fmt::format("{} | {} threads | {}{}", host::cpu_model(), threads, kernels::float_gemm_name(),
                                      openblas ? fmt::format(" (core {})", kernels::openblas_core()) : std::string());
  const fs::path file = machine_cache_path("peak-flops.json");
  const nlohmann::json cache = read_machine_cache(file);
  // A figure no CPU process reaches (an edited or damaged file) is measured again rather than
  // turned into an MFU of 0 % or of millions.
  constexpr double kLeastGflops = 0.01, kMostGflops = 1e6;
  if (const auto it = cache.find(key); it != cache.end() && it->is_object() && it->contains("gflops") &&
                                       (*it)["gflops"].is_number()) {
    const double gflops = (*it)["gflops"].get<double>();
    if (gflops >= kLeastGflops && gflops <= kMostGflops) {
      return {gflops * 1e9, fmt::format("calibrated once, stored in {}", file.string())};
    }
  }
  // Stored only when nothing else ran: other processes' share of the cores while it measured (a
  // training job started a moment ago does not show in the load average yet), and the load
  // average (a job that paused for the moment it measured).
  const host::CpuTimes before = host::cpu_times_now();
  const double flops = measure(1.0);
  const double others =
      host::others_share(before, host::cpu_times_now(), std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  const double load = host::load_average();
  if (others > kQuietShare || load > 0.5) {
    return {flops, fmt::format("measured now, on a busy machine (other processes took {:.0f}% of the cores, load "
                               "average {:.1f}): not stored", 100 * others, load)};
  }
  const nlohmann::json entry = {{"gflops", flops / 1e9},
                                {"measured_unix_time", static_cast<int64_t>(std::time(nullptr))}};
  if (store_in_machine_cache(file, key, entry)) {
    return {flops, fmt::format("calibrated now, stored in {}", file.string())};
  }
  return {flops, "calibrated now (could not store it)"};
}

double model_flops_utilization(double achieved_flops, double peak_flops) {
  if (!(peak_flops > 0)) return -1;
  const double mfu = achieved_flops / peak_flops;
  return mfu <= 1.0 ? mfu : -1;
}

}  // namespace tessera::train
