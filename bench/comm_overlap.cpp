// Does communication overlap computation? Each rank posts an asynchronous all-reduce of a
// gradient-sized buffer and computes GEMMs meanwhile; the same all-reduce alone and the same
// GEMMs alone are timed in the same run, interleaved, and the fraction of the all-reduce time
// hidden behind compute is
//     hidden = (t_allreduce + t_compute - t_both) / t_allreduce     (1: fully hidden, 0: serial)
// and the time the caller was left waiting after its compute shows the rest of the picture.
// Times are the slowest rank's, medians over --reps rounds.
//
//   mpirun -n 2 comm_overlap [--mib 64] [--gemm 512] [--gemms 0 (auto)] [--reps 7] [--poll-us 100]
//                            [--compute gemm|sleep]
// --compute sleep stands in for kernels that run off the CPU (a GPU's): the caller sleeps as long
// as the GEMMs would take, so the all-reduce has the cores to itself and only the progress
// thread can move it forward. It separates "does the runtime progress on its own" from "are
// there cores to spare", which a CPU-only machine whose cores the GEMMs fill cannot.
//
// Prints a table and, last, one JSON line {"bench": "comm_overlap", ...}.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "dist/mpi_runtime.h"

using namespace tessera;
using namespace tessera::dist;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Gemms {
  int n;
  std::vector<float> a, b, c;
  explicit Gemms(int size) : n(size), a(static_cast<size_t>(n) * n), b(a.size()), c(a.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = uniform(7, 1, i) - 0.5f;
      b[i] = uniform(7, 2, i) - 0.5f;
    }
  }
  double sleep_per_gemm = 0;  // > 0: sleep this long per GEMM instead of computing
  void run(int count) {
    if (sleep_per_gemm > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_per_gemm * count));
      return;
    }
    for (int k = 0; k < count; ++k) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    }
  }
  double flops(int count) const { return 2.0 * n * static_cast<double>(n) * n * count; }
};

}  // namespace

int main(int argc, char** argv) {
  double mib = 64;
  int gemm = 512, gemms = 0, reps = 7, poll_us = 100;
  std::string compute_kind = "gemm";
  CLI::App app{"fraction of an asynchronous all-reduce hidden behind GEMMs"};
  app.add_option("--mib", mib, "all-reduce buffer in MiB of f32")->check(CLI::PositiveNumber);
  app.add_option("--gemm", gemm, "GEMM size n (n x n x n)")->check(CLI::PositiveNumber);
  app.add_option("--gemms", gemms, "GEMMs per round (0: as many as take 1.25x the all-reduce)");
  app.add_option("--reps", reps, "timed rounds (medians are reported)")->check(CLI::PositiveNumber);
  app.add_option("--poll-us", poll_us, "longest pause of the progress thread between polls")->check(CLI::NonNegativeNumber);
  app.add_option("--compute", compute_kind, "gemm: compute on the CPU; sleep: stand-in for off-CPU kernels")
      ->check(CLI::IsMember({"gemm", "sleep"}));
  CLI11_PARSE(app, argc, argv);

  MpiRuntime mpi(&argc, &argv);
  CommOptions options;
  options.max_poll_interval_us = poll_us;
  auto world = mpi.world(options);
  const int rank = world->rank();
  const size_t count = static_cast<size_t>(mib * 1024 * 1024 / 4);
  std::vector<float> grad(count, 1.0f);
  Gemms compute(gemm);

  auto slowest = [&](double seconds) {
    std::vector<float> v{static_cast<float>(seconds)};
    world->all_reduce(std::span(v), ReduceOp::Max)->wait();
    return static_cast<double>(v[0]);
  };
  auto all_reduce_alone = [&] {
    world->barrier()->wait();
    const auto t0 = Clock::now();
    world->all_reduce(std::span(grad), ReduceOp::Sum)->wait();
    return slowest(since(t0));
  };
  auto compute_alone = [&](int k) {
    world->barrier()->wait();
    const auto t0 = Clock::now();
    compute.run(k);
    return slowest(since(t0));
  };

  // Warm up (thread pools, page faults, MPI connections), then size the compute to the all-reduce.
  all_reduce_alone();
  compute_alone(1);
  // Per-GEMM time, measured once, sizes the compute (and the sleep that stands in for it).
  std::vector<float> calibration{static_cast<float>(median({all_reduce_alone(), all_reduce_alone(), all_reduce_alone()})),
                                 static_cast<float>(median({compute_alone(2), compute_alone(2), compute_alone(2)}) / 2)};
  world->broadcast(std::span(calibration), 0)->wait();  // every rank runs the same amount
  if (gemms <= 0) {
    // A little more compute than communication, so the all-reduce can hide entirely.
    gemms = std::max(1, static_cast<int>(std::ceil(1.25 * calibration[0] / calibration[1])));
  }
  if (compute_kind == "sleep") compute.sleep_per_gemm = calibration[1];

  std::vector<double> t_ar, t_comp, t_both, t_comp_in_both, t_ar_in_both;
  uint64_t sent = 0;  // by this rank, per all-reduce of the buffer
  for (int r = 0; r < reps; ++r) {
    t_ar.push_back(all_reduce_alone());
    t_comp.push_back(compute_alone(gemms));
    world->barrier()->wait();
    const auto t0 = Clock::now();
    WorkPtr w = world->all_reduce(std::span(grad), ReduceOp::Sum);
    compute.run(gemms);
    const double computed = since(t0);
    w->wait();
    const double both = since(t0);
    t_both.push_back(slowest(both));
    t_comp_in_both.push_back(slowest(computed));
    t_ar_in_both.push_back(slowest(w->seconds()));
    sent = w->bytes_sent();
  }

  const double ar = median(t_ar), comp = median(t_comp), both = median(t_both);
  // Not clamped: below 0 the overlapped round took longer than the two in series.
  const double hidden = (ar + comp - both) / ar;
  const double bytes = static_cast<double>(count) * 4;
  const int n = world->size();
  const double busbw = bytes / ar * 2.0 * (n - 1) / n / 1e9;  // the NCCL-tests convention

  if (rank == 0) {
    fmt::print("ranks {}, OMP threads per rank {}, all-reduce {:.1f} MiB f32, {} GEMMs of n = {} per round{}, "
               "progress poll <= {} us, {} rounds (medians, slowest rank)\n",
               n, omp_get_max_threads(), mib, gemms, gemm, compute_kind == "sleep" ? " (slept, not computed)" : "",
               poll_us, reps);
    fmt::print("{:<34} {:>10}\n", "", "seconds");
    fmt::print("{:<34} {:>10.4f}   bus bandwidth {:.2f} GB/s\n", "all-reduce alone", ar, busbw);
    fmt::print("{:<34} {:>10.4f}   {:.1f} GFLOP/s per rank{}\n", "compute alone", comp, compute.flops(gemms) / comp / 1e9,
               compute_kind == "sleep" ? " (as if)" : "");
    fmt::print("{:<34} {:>10.4f}\n", "serial (sum of the two)", ar + comp);
    fmt::print("{:<34} {:>10.4f}\n", "overlapped: post, compute, wait", both);
    fmt::print("{:<34} {:>10.4f}\n", "  of which compute", median(t_comp_in_both));
    fmt::print("{:<34} {:>10.4f}\n", "  all-reduce post to completion", median(t_ar_in_both));
    fmt::print("hidden fraction of the all-reduce: {:.2f}\n", hidden);
    // Where the time went when overlapped: the caller waits only for what is left of the
    // all-reduce after its compute; on a machine whose cores the compute already fills, the
    // all-reduce's own copying and summing slows the compute down instead.
    fmt::print("caller blocked in wait() after compute: {:.4f} s (all-reduce alone: {:.4f} s); compute slowed {:.2f}x\n",
               std::max(0.0, both - median(t_comp_in_both)), ar, median(t_comp_in_both) / comp);
    fmt::print("bytes sent per all-reduce by rank 0: {} (ring volume 2(N-1)/N x {:.0f} = {:.0f})\n",
               sent, bytes, 2.0 * (n - 1) / n * bytes);
    fmt::print("{{\"bench\": \"comm_overlap\", \"compute\": \"{}\", \"ranks\": {}, \"threads\": {}, \"mib\": {:.1f}, \"gemm\": {}, \"gemms\": {}, "
               "\"poll_us\": {}, \"reps\": {}, \"allreduce_s\": {:.5f}, \"compute_s\": {:.5f}, \"both_s\": {:.5f}, "
               "\"compute_in_both_s\": {:.5f}, \"allreduce_in_both_s\": {:.5f}, \"hidden\": {:.3f}, \"busbw_gbs\": {:.3f}}}\n",
               compute_kind, n, omp_get_max_threads(), mib, gemm, gemms, poll_us, reps, ar, comp, both, median(t_comp_in_both),
               median(t_ar_in_both), hidden, busbw);
  }
  return 0;
}
