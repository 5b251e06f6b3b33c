#include "cli/calibrate_here.h"
#include "cli/calibrate_disk.h"
#include "cli/calibrate_step.h"
#include "cli/this_tessera.h"

#include <fmt/format.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fmt/ranges.h>
#include <fstream>
#include <limits>
#include <span>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/host.h"
#include "core/rng.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/top_k_select.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"
#include "plan/cluster.h"
#include "plan/device_time.h"
#include "plan/estimate.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Above this share of the cores taken by other processes, a calibration warns that it measured a
// busy machine (a shell and a few daemons take 1-2 %).
constexpr double kBusyShare = 0.10;
// Seconds each measurement repeats for; the best repetition counts.
constexpr double kBudget = 0.15;
// A linear layer's products [2n x n] . [n x 2n] for these n: from the thinnest products of tiny
// models to where the BLAS peaks.
constexpr int kGemmSizes[] = {16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768};
// Passes over kGemmSizes, and measurements of the reference step: the best of them counts.
constexpr int kGemmPasses = 3;
constexpr int kReferenceStepRuns = 3;
// Attention: sequences of these lengths, 4 sequences of 4 heads of 64 (C = 256).
constexpr int kAttentionLengths[] = {32, 64, 128, 256, 512};
constexpr int kAttentionBatch = 4, kAttentionHeads = 4, kAttentionWidth = 256;
// Streaming: arrays far past the last-level cache (256 MiB each).
constexpr size_t kStreamFloats = size_t{64} << 20;

double elapsed(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Values like a model's (a standard normal times `scale`, a fixed stream): what a kernel's branches
// see decides its speed (GeLU's sign select costs twice as much on random signs as on a pattern).
std::vector<float> random_values(size_t n, float scale, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * normal(1, stream, i);
  return v;
}

// The shortest of repeated runs of fn: at least three, for at least kBudget seconds, after one
// warm-up run.
template <class F>
double best_time(F&& fn) {
  fn();
  double best = std::numeric_limits<double>::max();
  const auto start = Clock::now();
  for (int reps = 0; reps < 3 || elapsed(start) < kBudget; ++reps) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, elapsed(t0));
  }
  return best;
}

// FLOPs of one product of gemm_rate(n).
double gemm_flops(int n) { return 2.0 * (2.0 * n) * (2.0 * n) * n; }

// The three products of a linear layer y[M, N] = x[M, K] w[N, K]^T with M = N = 2n, K = n, as the
// engine calls them (kernels/cpu/linear.cpp): the forward (w transposed), the input gradient and
// the weight gradient (x transposed, accumulating); their mean rate, by the float GEMM library set
// now. Each call takes the next of several sets of operands, so that they come from memory as a
// step's do, not from a warm cache.
double library_gemm_rate(int n) {
  constexpr size_t kSets = 8;
  const int M = 2 * n, N = 2 * n, K = n;
  using kernels::Transpose;
  struct Operands {
    std::vector<float> x, w, y, dy, dx, dw;
  };
  std::vector<Operands> sets;
  for (size_t i = 0; i < kSets; ++i) {
    sets.push_back({random_values(static_cast<size_t>(M) * K, 1.0f, 10 + i), random_values(static_cast<size_t>(N) * K, 0.02f, 20 + i),
                    std::vector<float>(static_cast<size_t>(M) * N), random_values(static_cast<size_t>(M) * N, 0.01f, 30 + i),
                    std::vector<float>(static_cast<size_t>(M) * K), std::vector<float>(static_cast<size_t>(N) * K)});
  }
  size_t next = 0;
  auto set = [&]() -> Operands& { return sets[next++ % kSets]; };
  const float* none = nullptr;
  const double forward = best_time([&] {
    Operands& o = set();
    kernels::matmul(o.y.data(), o.x.data(), o.w.data(), none, M, N, K, Transpose::No, Transpose::Yes, false);
  });
  const double input = best_time([&] {
    Operands& o = set();
    kernels::matmul(o.dx.data(), o.dy.data(), o.w.data(), none, M, K, N, Transpose::No, Transpose::No, false);
  });
  const double weight = best_time([&] {
    Operands& o = set();
    kernels::matmul(o.dw.data(), o.dy.data(), o.x.data(), none, N, K, M, Transpose::Yes, Transpose::No, true);
  });
  return 3 * gemm_flops(n) / (forward + input + weight);
}

// The best of the float GEMM candidates' rates: a run takes the fastest for its model
// (precision.f32_gemm, kernels/cpu/gemm_choice.h), so the planner predicts with it.
struct GemmRate {
  double rate = 0;
  kernels::FloatGemm gemm;
};
// The fastest of `candidates` at size n.
GemmRate gemm_rate(int n, std::span<const kernels::FloatGemm> candidates) {
  const kernels::FloatGemm before = kernels::float_gemm();
  GemmRate best;
  for (kernels::FloatGemm gemm : candidates) {
    kernels::use_float_gemm(gemm);
    if (const double rate = library_gemm_rate(n); rate > best.rate) best = {rate, gemm};
  }
  kernels::use_float_gemm(before);
  return best;
}

double bf16_gemm_rate(int n) {
  std::vector<bf16> a(static_cast<size_t>(n) * n, bf16(0.5f)), b(a.size(), bf16(0.25f)), c(a.size(), bf16(0.0f));
  const double t = best_time([&] {
    kernels::matmul(c.data(), a.data(), b.data(), static_cast<const bf16*>(nullptr), n, n, n, kernels::Transpose::No,
                    kernels::Transpose::No, false);
  });
  return 2.0 * n * n * static_cast<double>(n) / t;
}

struct AttentionTimes {
  double flops = 0;  // of the forward, as the cost model counts it: 4 B T^2 C
  double forward = 0, backward = 0;
};

AttentionTimes attention_times(int T) {
  const int B = kAttentionBatch, H = kAttentionHeads, C = kAttentionWidth;
  const size_t rows = static_cast<size_t>(B) * T;
  std::vector<float> qkv = random_values(rows * 3 * C, 1.0f, 1), out(rows * C), lse(static_cast<size_t>(B) * H * T),
      dout = random_values(rows * C, 0.01f, 2), dqkv(rows * 3 * C);
  AttentionTimes t;
  t.flops = 4.0 * B * static_cast<double>(T) * T * C;
  t.forward = best_time([&] { kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, H, H); });
  t.backward = best_time([&] {
    kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, H, H);
  });
  return t;
}

// y = a x + y: 12 bytes per element, over arrays far larger than the caches.
double stream_rate(std::vector<float>& x, std::vector<float>& y) {
  const auto n = static_cast<int64_t>(x.size());
  const double t = best_time([&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = 0.999f * x[static_cast<size_t>(i)] + y[static_cast<size_t>(i)];
  });
  return 12.0 * static_cast<double>(n) / t;
}

// This engine's elementwise kernels at the sizes of a small model's microbatch (2048 tokens of 256
// channels, an MLP of 1024, a vocabulary of 2048) on normally distributed values, seconds per value;
// its optimizer step over 4M parameters (more than the caches hold), seconds per parameter; and
// top-k compression over as many gradient elements, seconds per element.
plan::KernelCosts kernel_costs() {
  constexpr int kRows = 2048, kChannels = 256, kHidden = 1024, kTokens = 512, kVocab = 2048;
  constexpr size_t kParams = size_t{4} << 20;
  plan::KernelCosts k;
  {
    const size_t n = size_t{kRows} * kChannels;
    std::vector<float> x = random_values(n, 1.0f, 3), y(n), dy = random_values(n, 0.01f, 4), dx(n), w(kChannels, 1.0f),
        b(kChannels, 0.0f), dw(kChannels), db(kChannels), mean(kRows), rstd(kRows);
    k.norm = best_time([&] {
      kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kRows, kChannels, 1e-5f);
    }) / static_cast<double>(n);
    k.norm_backward = best_time([&] {
      kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                  kRows, kChannels);
    }) / static_cast<double>(n);
    k.residual = best_time([&] { kernels::add_inplace(y.data(), x.data(), n); }) / static_cast<double>(n);
  }
  {
    const size_t n = size_t{kTokens} * kHidden;
    std::vector<float> x = random_values(n, 1.0f, 5), y(n), dy = random_values(n, 0.01f, 6), dx(n);
    k.activation = best_time([&] { kernels::gelu_forward(y.data(), x.data(), n); }) / static_cast<double>(n);
    k.activation_backward = best_time([&] { kernels::gelu_backward(dx.data(), x.data(), dy.data(), n); }) /
                            static_cast<double>(n);
  }
  {
    const size_t n = size_t{kTokens} * kVocab;
    std::vector<float> source = random_values(n, 2.0f, 7), logits(n), losses(kTokens);
    std::vector<int32_t> targets(kTokens);
    for (int i = 0; i < kTokens; ++i) targets[static_cast<size_t>(i)] = (i * 31) % kVocab;
    // Each run overwrites the logits with their gradient: it starts from a fresh copy, whose time
    // (a copy of the logits) is measured alone and taken off.
    const double copy = best_time([&] { std::copy(source.begin(), source.end(), logits.begin()); });
    const double both = best_time([&] {
      std::copy(source.begin(), source.end(), logits.begin());
      kernels::cross_entropy_forward_backward(logits.data(), losses.data(), targets.data(), kTokens, kVocab, -1,
                                              1.0f / kTokens);
    });
    k.cross_entropy = std::max(both - copy, 0.0) / static_cast<double>(n);
  }
  {
    std::vector<float> param = random_values(kParams, 0.02f, 8), grad = random_values(kParams, 0.001f, 9),
        m(kParams, 0.0f), v(kParams, 0.0f);
    int64_t step = 0;
    k.optimizer = best_time([&] {
      const double norm = std::sqrt(kernels::sum_of_squares(grad.data(), kParams));
      kernels::scale_inplace(grad.data(), static_cast<float>(1.0 / std::max(norm, 1.0)), kParams);
      kernels::adamw_update(param.data(), grad.data(), m.data(), v.data(), kParams, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
      std::fill(grad.begin(), grad.end(), 0.0f);
    }) / static_cast<double>(kParams);
  }
  {
    // Top-k compression of a 4M-element bucket at the default 1 %, between two ranks: the error
    // feedback and the selection, then the gradient rebuilt from both ranks' entries.
    std::vector<float> grad = random_values(kParams, 0.001f, 10), residual(kParams, 0.0f), reduced(kParams);
    const auto kTopK = static_cast<int64_t>(kParams / 100);
    k.top_k = best_time([&] {
      const kernels::SparseEntries sent = kernels::take_top_k_with_feedback(residual, grad, kTopK);
      std::vector<int32_t> index = sent.index;
      std::vector<float> values = sent.values;
      index.insert(index.end(), sent.index.begin(), sent.index.end());
      values.insert(values.end(), sent.values.begin(), sent.values.end());
      kernels::scatter_entries(reduced, index, values);
    }) / static_cast<double>(kParams);
  }
  return k;
}

// The fixed cost of a parallel kernel: an OpenMP loop with nothing to do but wake its team.
double kernel_overhead() {
  std::vector<int> sink(static_cast<size_t>(omp_get_max_threads()), 0);
  double best = std::numeric_limits<double>::max();
  for (int round = 0; round < 20; ++round) {
    constexpr int kLoops = 200;
    const auto t0 = Clock::now();
    for (int r = 0; r < kLoops; ++r) {
#pragma omp parallel for schedule(static)
      for (int i = 0; i < static_cast<int>(sink.size()); ++i) sink[static_cast<size_t>(i)] += r;
    }
    best = std::min(best, elapsed(t0) / kLoops);
  }
  return best;
}

// MemTotal and MemAvailable of /proc/meminfo, bytes.
std::pair<double, double> memory_now() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0, total = 0, available = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") total = kib * 1024.0;
    if (key == "MemAvailable:") available = kib * 1024.0;
  }
  TS_CHECK(total > 0 && available > 0, "plan --calibrate-here: /proc/meminfo gives no MemTotal and MemAvailable; the "
           "machine's memory cannot be measured here (Linux only)");
  return {total, available};
}

// Starts this tessera with `args`; returns its pid.
pid_t start_tessera(const std::vector<std::string>& args) {
  std::vector<std::string> words = this_tessera_with(args);
  std::vector<char*> argv;
  for (std::string& a : words) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  TS_CHECK(pid >= 0, "plan --calibrate-here: could not start `tessera {}` (fork failed)", fmt::join(args, " "));
  if (pid == 0) {
    ::execv(words.front().c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid`, then reads the JSON it wrote to `file` (and removes it).
nlohmann::json result_of(pid_t pid, const std::filesystem::path& file, const std::string& what) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  TS_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && std::filesystem::exists(file),
           "plan --calibrate-here: {} failed; run it alone to see why", what);
  std::ifstream in(file);
  nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(file);
  return j;
}

std::filesystem::path scratch_file(const std::string& what, int index) {
  return std::filesystem::temp_directory_path() / fmt::format("tessera-{}-{}-{}.json", what, ::getpid(), index);
}

// Runs `tessera launch -n <ranks> -- plan --calibrate-links FILE` (or --calibrate-busy-links) and
// reads what rank 0 wrote.
nlohmann::json run_link_measurement(int ranks, bool busy) {
  const std::filesystem::path file = scratch_file("links", ranks);
  const std::string option = busy ? "--calibrate-busy-links" : "--calibrate-links";
  const pid_t pid = start_tessera({"launch", "-n", std::to_string(ranks), "--", "plan", option, file.string()});
  return result_of(pid, file,
                   fmt::format("the link measurement `tessera launch -n {} -- plan {} {}` (it needs OpenMPI and {} "
                               "processes on this machine)", ranks, option, file.string(), ranks));
}

// The reference step with `threads` threads: one process alone (`tessera plan --calibrate-step FILE
// --step-threads N`), or, where the cores hold several, a data-parallel step over that many ranks
// (`tessera launch -n R -- plan --calibrate-step ...`), as a run's ranks share the machine's caches
// and memory, and wait for each other and for their communicators' progress threads.
double reference_step_seconds(int threads, int ranks) {
  const std::filesystem::path file = scratch_file("step", ranks);
  std::vector<std::string> command = {"plan", "--calibrate-step", file.string(), "--step-threads",
                                      std::to_string(threads)};
  if (ranks > 1) command.insert(command.begin(), {"launch", "-n", std::to_string(ranks), "--"});
  return result_of(start_tessera(command), file,
                   fmt::format("the step measurement `tessera {}`", fmt::join(command, " ")))["seconds"].get<double>();
}

}  // namespace

std::pair<double, double> fit_all_reduce(const std::vector<double>& sizes, const std::vector<double>& seconds,
                                         double fit_from_bytes) {
  TS_CHECK(sizes.size() >= 2 && sizes.size() == seconds.size() && sizes.back() >= fit_from_bytes,
           "plan --calibrate-here: the link measurement came back with {} sizes up to {} bytes", sizes.size(),
           sizes.empty() ? 0.0 : sizes.back());
  const double a = seconds.front() / 2;
  auto error = [&](double w) {
    double sum = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] >= fit_from_bytes) sum += std::pow(std::log((2 * a + sizes[i] / w) / seconds[i]), 2);
    }
    return sum;
  };
  // A grid search in 1% steps, finer than the measurements' own spread.
  const double w0 = sizes.back() / seconds.back();
  double best_w = w0, best = error(w0);
  for (int j = -100; j <= 500; ++j) {
    const double w = w0 * std::pow(1.01, j);
    if (const double e = error(w); e < best) {
      best = e;
      best_w = w;
    }
  }
  return {a, best_w};
}

namespace {

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

void calibrate_here(const std::string& out, const std::string& name, const std::string& offload_dir) {
  // A minute of measuring is lost if the file cannot be written at the end: check its place first.
  const std::filesystem::path target(out);
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  TS_CHECK(!out.empty() && !std::filesystem::is_directory(target, ec),
           "plan --calibrate-here: --out must name a file to write, got '{}'", out);
  TS_CHECK(std::filesystem::is_directory(folder, ec), "plan --calibrate-here: cannot write {}: the folder {} does not exist",
           out, folder.string());
  {
    AtomicFile probe(target);  // the same temporary file the end writes, removed uncommitted
  }
  const DiskMeasurement disk = plan_disk_measurement(offload_dir.empty() ? folder.string() : offload_dir);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<int> thread_counts;
  for (int t = 1; t < cores; t *= 2) thread_counts.push_back(t);
  thread_counts.push_back(cores);
  const auto start = Clock::now();
  const host::CpuTimes cpu_at_start = host::cpu_times_now();
  const std::string cpu = host::cpu_model();
  fmt::print("calibrating this machine: {}, {} cores; each figure is the best of repeated runs\n", cpu, cores);

  struct Measured {
    int threads = 1;
    std::vector<double> gemm_rates;
    std::vector<AttentionTimes> attention;
    double bandwidth = 0, overhead = 0;
    plan::KernelCosts kernels;
  };
  std::vector<Measured> measured;
  std::vector<float> x(kStreamFloats, 1.0f), y(kStreamFloats, 0.5f);
  double per_core_peak = 0;
  const int saved_threads = omp_get_max_threads();
  for (int t : thread_counts) {
    omp_set_num_threads(t);
    Measured m;
    m.threads = t;
    fmt::print("  {} thread{}: a linear layer's sgemms [2n x n x 2n] by the fastest float GEMM, the best of {} passes, "
               "GFLOP/s at n =", t, t == 1 ? "" : "s", kGemmPasses);
    // Passes over all sizes, each size's best kept: a machine shared with other work runs slow for
    // seconds at a time, longer than one size's repetitions last, and a slow spell would otherwise
    // set the rate of whichever sizes it fell on.
    // The passes after the first time only the candidate the first found fastest at each size.
    std::vector<GemmRate> rates;
    for (int n : kGemmSizes) rates.push_back(gemm_rate(n, kernels::kFloatGemmCandidates));
    for (int pass = 1; pass < kGemmPasses; ++pass) {
      for (size_t i = 0; i < std::size(kGemmSizes); ++i) {
        rates[i].rate = std::max(rates[i].rate, gemm_rate(kGemmSizes[i], std::span(&rates[i].gemm, 1)).rate);
      }
    }
    m.gemm_rates.clear();
    for (const GemmRate& r : rates) m.gemm_rates.push_back(r.rate);
    for (size_t i = 0; i < std::size(kGemmSizes); ++i) {
      per_core_peak = std::max(per_core_peak, m.gemm_rates[i] / t);
      fmt::print(" {}: {:.1f}", kGemmSizes[i], m.gemm_rates[i] / 1e9);
    }
    std::fflush(stdout);
    fmt::print("\n  {} thread{}: attention forward / backward GFLOP/s at T =", t, t == 1 ? "" : "s");
    for (int T : kAttentionLengths) {
      m.attention.push_back(attention_times(T));
      const AttentionTimes& a = m.attention.back();
      fmt::print(" {}: {:.1f} / {:.1f}", T, a.flops / a.forward / 1e9, plan::kFlashBackwardFlops * a.flops / a.backward / 1e9);
      std::fflush(stdout);
    }
    m.bandwidth = stream_rate(x, y);
    m.overhead = kernel_overhead();
    fmt::print("\n  {} thread{}: streaming {:.1f} GB/s; a parallel kernel's fixed cost {:.2f} us\n", t,
               t == 1 ? "" : "s", m.bandwidth / 1e9, m.overhead * 1e6);
    m.kernels = kernel_costs();
    const plan::KernelCosts& k = m.kernels;
    fmt::print("  {} thread{}: ns per value: layernorm {:.2f} / {:.2f}, GeLU {:.2f} / {:.2f}, residual add {:.2f}, "
               "cross-entropy {:.2f}; optimizer step {:.2f} ns per parameter; top-k compression {:.2f} ns per "
               "gradient element\n",
               t, t == 1 ? "" : "s", k.norm * 1e9, k.norm_backward * 1e9, k.activation * 1e9,
               k.activation_backward * 1e9, k.residual * 1e9, k.cross_entropy * 1e9, k.optimizer * 1e9, k.top_k * 1e9);
    measured.push_back(std::move(m));
  }
  omp_set_num_threads(1);
  const double bf16_per_core = std::max(bf16_gemm_rate(512), bf16_gemm_rate(1024));
  omp_set_num_threads(saved_threads);
  fmt::print("  bf16 GEMM, 1 thread: {:.1f} GFLOP/s\n", bf16_per_core / 1e9);

  fmt::print("  links: two processes through the runtime's communicator (tessera launch -n 2) ...\n");
  const nlohmann::json links = run_link_measurement(2, false);
  const std::vector<double> sizes = links["bytes"], one_way = links["one_way_seconds"], reduce = links["all_reduce_seconds"];
  // Fitted over the messages of 32 KiB and more, the sizes of a run's activations and gradients.
  const auto [latency, bandwidth] = fit_all_reduce(sizes, reduce, 32768);
  for (size_t i = 0; i < sizes.size(); ++i) {
    fmt::print("    {:>9} B: all-reduce {:8.2f} us (ring model {:8.2f}); one way {:8.2f} us (model {:8.2f})\n", sizes[i],
               reduce[i] * 1e6, (2 * latency + sizes[i] / bandwidth) * 1e6, one_way[i] * 1e6,
               (latency + sizes[i] / bandwidth) * 1e6);
  }
  fmt::print("  links: latency {:.2f} us, bandwidth {:.2f} GB/s (fitted to the all-reduces)\n", latency * 1e6,
             bandwidth / 1e9);
  // Between busy processes: a core each, then 2 and 4 to a core; pairs computing, then all-reducing.
  std::vector<double> shared_factor, shared_latency;
  for (int factor : {1, 2, 4}) {
    const int ranks = std::max(2, factor * cores + (factor * cores) % 2);
    fmt::print("  links between busy processes, {} to a core (tessera launch -n {}) ...\n", factor, ranks);
    const nlohmann::json shared = run_link_measurement(ranks, true);
    shared_factor.push_back(static_cast<double>(ranks) / cores);
    shared_latency.push_back(shared["latency_seconds"].get<double>());
    fmt::print("  links between busy processes, {} to a core: latency {:.1f} us (the median of a small all-reduce "
               "after about 2 ms of compute, halved)\n", factor, shared_latency.back() * 1e6);
  }

  const plan::DiskSpec disk_bandwidth = measure_disk(disk);

  const auto [total, available] = memory_now();
  plan::ClusterSpec c;
  c.name = name;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::localtime(&now));
  c.description = fmt::format("{}, {} cores, processes sharing them; measured by tessera plan --calibrate-here on {}",
                              cpu, cores, date);
  c.devices_per_node = 0;
  c.max_nodes = 1;
  c.device.name = fmt::format("{} ({} cores)", cpu, cores);
  c.device.peak_flops_fp32 = cores * per_core_peak;
  c.device.peak_flops_bf16 = cores * bf16_per_core;
  c.device.memory_bytes = total;
  c.device.reserved_bytes = total - available;
  c.device.memory_bandwidth = measured.back().bandwidth;
  c.intra_node = {bandwidth, latency};
  c.inter_node = c.intra_node;  // one node: never crossed, but every cluster names the link
  c.efficiency.memory = 1.0;    // the bandwidths are achieved rates
  c.efficiency.link = 1.0;
  c.efficiency.kernel_overhead = measured.back().overhead;
  c.efficiency.kernels = measured.back().kernels;
  c.disk = disk_bandwidth;
  c.host.cores = cores;
  c.host.shared_factor = shared_factor;
  c.host.shared_latency = shared_latency;
  for (const Measured& m : measured) {
    plan::ProcessSpec p;
    p.threads = m.threads;
    p.memory_bandwidth = m.bandwidth;
    p.kernel_overhead = m.overhead;
    p.kernels = m.kernels;
    const double peak = m.threads * per_core_peak;
    for (size_t i = 0; i < std::size(kGemmSizes); ++i) {
      p.gemm.flops.push_back(gemm_flops(kGemmSizes[i]));
      p.gemm.efficiency.push_back(std::min(1.0, m.gemm_rates[i] / peak));
    }
    for (const AttentionTimes& a : m.attention) {
      p.attention.flops.push_back(a.flops);
      p.attention.efficiency.push_back(std::min(1.0, a.flops / a.forward / peak));
      p.attention_backward.flops.push_back(a.flops);
      p.attention_backward.efficiency.push_back(std::min(1.0, plan::kFlashBackwardFlops * a.flops / a.backward / peak));
    }
    c.host.processes.push_back(std::move(p));
  }
  c.efficiency.gemm = c.host.processes.back().gemm.efficiency.back();
  c.validate();
  // The whole step against its kernels: the engine's training step on a reference model with each
  // thread count, in as many processes as the cores hold (a data-parallel run: a run's ranks share
  // the caches and the memory and wait for each other), and what the measurements above, each taken
  // alone, predict for it. The step efficiency divides compute only, so the predicted communication
  // is taken off both sides; the efficiencies are still 1 while they are predicted.
  const config::ModelConfig reference = reference_model();
  for (plan::ProcessSpec& p : c.host.processes) {
    const int ranks = std::max(1, cores / p.threads);
    const plan::Layout step = plan::parse_layout(fmt::format("dp={},mb={},gb={},precision=fp32,flash=true,states=engine",
                                                             ranks, kReferenceBatch, kReferenceBatch * ranks));
    const plan::Estimate predicted = plan::estimate(reference, step, c);
    const double communication = predicted.time.dp_comm;
    // The fastest of a few runs, each a median of steps: the kernels above are each their best, and
    // an efficiency from a step slowed by a spell of other work would slow every prediction.
    double step_seconds = std::numeric_limits<double>::max();
    for (int run = 0; run < kReferenceStepRuns; ++run) step_seconds = std::min(step_seconds, reference_step_seconds(p.threads, ranks));
    p.step_efficiency = std::clamp((predicted.time.step - communication) / std::max(step_seconds - communication, 1e-9),
                                   1e-3, 2.0);
    // The figures printed are the two the efficiency divides, so a reader can check it.
    fmt::print("  {} thread{}: the engine's training step of a reference model ({} parameters) {}: {:.1f} ms of "
               "compute{}, its kernels predict {:.1f} ms: step efficiency {:.3f}\n",
               p.threads, p.threads == 1 ? "" : "s", reference.parameter_count(),
               ranks > 1 ? fmt::format("in a data-parallel run of {} processes", ranks) : std::string("in one process"),
               (step_seconds - communication) * 1e3,
               ranks > 1 ? fmt::format(" (the step's {:.1f} ms less {:.1f} ms of gradient all-reduce)", step_seconds * 1e3,
                                       communication * 1e3)
                         : std::string(),
               (predicted.time.step - communication) * 1e3, p.step_efficiency);
  }
  c.validate();
  // Work of other processes slows every figure above; the file says how much of the cores it took.
  const double others = host::others_share(cpu_at_start, host::cpu_times_now(), cores);
  write_file_atomically(out, fmt::format("# This machine as the cost model sees it (docs/planner.md, \"The planner on this "
                                         "machine\"): written by `tessera plan --calibrate-here`.\n# The inter_node link "
                                         "is the intra_node one: a single machine never crosses a network (`--calibrate-here "
                                         "--hosts` measures it).\n# Other "
                                         "processes kept {:.0f}% of the cores busy while it was measured.\n{}",
                                         100 * others, plan::cluster_toml(c)));
  fmt::print("peak {:.1f} GFLOP/s ({} x {:.1f} per core), {:.1f} GB/s streaming, {} of {} in use by others, disk "
             "{:.2f} GB/s written and {:.2f} GB/s read\n",
             c.device.peak_flops_fp32 / 1e9, cores, per_core_peak / 1e9, c.device.memory_bandwidth / 1e9,
             gib(c.device.reserved_bytes), gib(total), c.disk.write_bandwidth / 1e9, c.disk.read_bandwidth / 1e9);
  fmt::print("other processes kept {:.0f}% of the cores busy while calibrating\n", 100 * others);
  if (others > kBusyShare) {
    fmt::print(stderr, "warning: plan --calibrate-here: the machine was busy: every speed above is slower than this "
               "machine's own, and plans made with {} will predict steps slower than an idle machine runs; calibrate "
               "again when it is idle\n", out);
  }
  fmt::print("wrote {} in {:.0f} s; predict a run on it with: tessera plan --config run.toml --cluster {}\n", out,
             elapsed(start), out);
}

}  // namespace tessera::cli
