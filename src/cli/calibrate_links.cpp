// The ranks' side of `tessera plan --calibrate-here`'s link measurement: messages through the
// runtime's own communicator (its progress thread included), as a run's collectives see them.
#include <algorithm>
#include <array>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/calibrate_here.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "dist/mpi_runtime.h"
#include "kernels/cpu/matmul.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

double elapsed(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Repetitions per size: enough for a best case at the small sizes, fewer for the large; and no
// more than fill kSizeBudget seconds, so that a slow network link (a 16 MiB message takes over a
// second at 100 Mbit/s) is measured in seconds, not minutes.
constexpr double kSizeBudget = 1.5;
int repetitions(size_t bytes) { return bytes <= (size_t{1} << 16) ? 200 : bytes <= (size_t{1} << 22) ? 40 : 10; }

// One warm-up run of `fn`, then the repetitions of this size that fit the budget. Both ranks must
// repeat as often, so they agree on the longer of their warm-up times.
template <class F>
int repetitions_within_budget(dist::Communicator& world, size_t bytes, F&& fn) {
  const auto t0 = Clock::now();
  fn();
  float first = static_cast<float>(elapsed(t0));
  world.all_reduce(&first, 1, DType::F32, dist::ReduceOp::Max)->wait();
  const int fit = static_cast<int>(kSizeBudget / std::max(first, 1e-9f));
  return std::clamp(fit, 3, std::max(3, repetitions(bytes)));
}

// Whether every rank runs on one kernel (the same boot id): nodes that are network
// namespaces of one machine share its cores and memory, separate machines do not. Compared as
// two 24-bit pieces of its hash, which floats hold exactly.
bool same_machine(dist::Communicator& world) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  const uint64_t hash = std::hash<std::string>{}(id);
  std::array<float, 4> pieces = {static_cast<float>(hash & 0xffffff), static_cast<float>((hash >> 24) & 0xffffff), 0, 0};
  pieces[2] = -pieces[0];
  pieces[3] = -pieces[1];
  world.all_reduce(pieces.data(), pieces.size(), DType::F32, dist::ReduceOp::Max)->wait();
  return pieces[0] == -pieces[2] && pieces[1] == -pieces[3];
}

// Busy pairs: ranks 0 and 1, 2 and 3, ... each compute (every rank at once) and then all-reduce a
// small message, as a run's collectives come between its kernels; the median of those
// all-reduces, halved as the ring model's 2a, is the latency a collective has when its partner must
// arrive (and, with more processes than cores, be scheduled). Rank 0 writes {"ranks",
// "latency_seconds"}.
void measure_shared_latency(dist::Communicator& world, const std::string& out) {
  // The work between collectives: ten 192^3 sgemms, about 2 ms on a core of their own. A fixed
  // amount of work, not of time, so that the partners arrive apart as much as this machine's jitter
  // (and, time-sliced, their turns) makes them.
  constexpr int kSize = 192, kProducts = 10, kRepetitions = 100;
  TS_CHECK(world.size() % 2 == 0, "plan --calibrate-links on {} processes: pairs need an even count", world.size());
  std::unique_ptr<dist::Communicator> pair = world.split(world.rank() / 2, world.rank() % 2, "pair");
  std::vector<float> a(kSize * kSize, 0.5f), b(a.size(), 0.25f), c(a.size());
  std::vector<double> times;
  float value = 1.0f;
  world.barrier()->wait();
  for (int r = 0; r < kRepetitions; ++r) {
    for (int k = 0; k < kProducts; ++k) {
      kernels::matmul(c.data(), a.data(), b.data(), static_cast<const float*>(nullptr), kSize, kSize, kSize,
                      kernels::Transpose::No, kernels::Transpose::No, false);
    }
    const auto t0 = Clock::now();
    pair->all_reduce(&value, 1, DType::F32, dist::ReduceOp::Max)->wait();
    times.push_back(elapsed(t0));
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  float median = static_cast<float>(times[times.size() / 2]);
  world.all_reduce(&median, 1, DType::F32, dist::ReduceOp::Sum)->wait();
  if (world.rank() == 0) {
    const nlohmann::json result = {{"ranks", world.size()},
                                   {"latency_seconds", static_cast<double>(median) / world.size() / 2}};
    write_file_atomically(out, result.dump());
  }
}

// While both ranks compute, as in a step whose gradient buckets cross the link behind backward:
// each rank posts an all-reduce of kBusyBytes and makes products on this thread until it
// completes. Against the same products alone this gives the link's rate while the cores compute,
// and how much slower the products run while the link carries traffic: where the transport's work
// (TCP's copies and checksums, a shaped queue) runs on the computing cores, both suffer. Rounds
// alone and beside a transfer alternate, each as long as the transfer, and the medians are
// compared, so that a machine whose speed drifts (a shared host) moves both alike. Each rank
// computes with `threads` threads, the share of the cores a training rank of this node has. Adds
// "busy_bytes", "busy_all_reduce_seconds" (the median) and "compute_slowdown" (the median
// product's time beside a transfer over the median alone, the ranks' mean) to `result`.
void measure_busy_link(dist::Communicator& world, int threads, nlohmann::json& result) {
  constexpr size_t kBusyBytes = size_t{16} << 20;
  constexpr int kSize = 384, kRounds = 7;
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> a(kSize * kSize, 0.5f), b(a.size(), 0.25f), c(a.size());
  auto product = [&] {
    kernels::matmul(c.data(), a.data(), b.data(), static_cast<const float*>(nullptr), kSize, kSize, kSize,
                    kernels::Transpose::No, kernels::Transpose::No, false);
  };
  product();
  std::vector<float> buffer(kBusyBytes / sizeof(float), 1.0f);
  std::vector<double> reduce_seconds, alone_seconds, beside_seconds;
  double round_seconds = 0.2;  // the first round alone; then as long as the last transfer
  for (int r = 0; r < kRounds; ++r) {
    world.barrier()->wait();
    auto t0 = Clock::now();
    int products = 0;
    do {
      product();
      ++products;
    } while (elapsed(t0) < round_seconds);
    alone_seconds.push_back(elapsed(t0) / products);
    world.barrier()->wait();
    t0 = Clock::now();
    dist::WorkPtr work = world.all_reduce(buffer.data(), buffer.size(), DType::F32, dist::ReduceOp::Sum);
    products = 0;
    while (!work->is_completed()) {
      product();
      ++products;
    }
    const double seconds = elapsed(t0);
    work->wait();
    reduce_seconds.push_back(seconds);
    round_seconds = seconds;
    if (products > 0) beside_seconds.push_back(seconds / products);
  }
  omp_set_num_threads(saved_threads);
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  // A rank whose products never ran beside the transfer (it finished first) saw no slowdown.
  const double slowdown = beside_seconds.empty() ? 1.0 : std::max(1.0, median(beside_seconds) / median(alone_seconds));
  std::array<float, 2> figures = {static_cast<float>(median(reduce_seconds)), static_cast<float>(slowdown)};
  world.all_reduce(figures.data(), figures.size(), DType::F32, dist::ReduceOp::Sum)->wait();
  result["busy_bytes"] = static_cast<double>(kBusyBytes);
  result["busy_all_reduce_seconds"] = static_cast<double>(figures[0]) / world.size();
  result["compute_slowdown"] = static_cast<double>(figures[1]) / world.size();
}

}  // namespace

void measure_links(const std::string& out, bool busy) {
  dist::MpiRuntime mpi;
  std::unique_ptr<dist::Communicator> world = mpi.world();
  if (busy) {
    measure_shared_latency(*world, out);
    return;
  }
  TS_CHECK(world->size() == 2, "plan --calibrate-links runs on two processes or more (tessera launch -n 2 -- plan "
           "--calibrate-links FILE), not {}", world->size());
  const int rank = world->rank(), peer = 1 - rank;
  nlohmann::json result = {{"bytes", nlohmann::json::array()},
                           {"one_way_seconds", nlohmann::json::array()},
                           {"all_reduce_seconds", nlohmann::json::array()}};
  for (size_t bytes = 8; bytes <= (size_t{16} << 20); bytes *= 8) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> buffer(count, 1.0f);
    world->barrier()->wait();
    // Ping-pong: rank 0 sends, rank 1 sends back; half the best round trip is one message.
    auto ping_pong = [&] {
      if (rank == 0) {
        world->send(buffer.data(), count, DType::F32, peer)->wait();
        world->recv(buffer.data(), count, DType::F32, peer)->wait();
      } else {
        world->recv(buffer.data(), count, DType::F32, peer)->wait();
        world->send(buffer.data(), count, DType::F32, peer)->wait();
      }
    };
    double best = std::numeric_limits<double>::max();
    for (int r = 0, n = repetitions_within_budget(*world, bytes, ping_pong); r < n; ++r) {
      const auto t0 = Clock::now();
      ping_pong();
      best = std::min(best, elapsed(t0) / 2);
    }
    world->barrier()->wait();
    auto all_reduce = [&] { world->all_reduce(buffer.data(), count, DType::F32, dist::ReduceOp::Sum)->wait(); };
    double reduce = std::numeric_limits<double>::max();
    for (int r = 0, n = repetitions_within_budget(*world, bytes, all_reduce); r < n; ++r) {
      const auto t0 = Clock::now();
      all_reduce();
      reduce = std::min(reduce, elapsed(t0));
    }
    result["bytes"].push_back(static_cast<double>(bytes));
    result["one_way_seconds"].push_back(best);
    result["all_reduce_seconds"].push_back(reduce);
  }
  const bool shared = same_machine(*world);
  result["same_machine"] = shared;
  // A training rank of a node that is a share of one machine has that share of its cores.
  const int threads = shared ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world->size())
                             : omp_get_max_threads();
  measure_busy_link(*world, threads, result);
  world->barrier()->wait();
  if (rank != 0) return;
  // Across machines rank 0's files may not be the launcher's: "-" hands the result back through
  // the job's output, which mpirun forwards to the launcher.
  if (out == kLinksToOutput) {
    fmt::print("{}{}\n", kLinksLinePrefix, result.dump());
    std::fflush(stdout);
  } else {
    write_file_atomically(out, result.dump());
  }
}

}  // namespace tessera::cli
