// The ranks' side of `tessera plan --calibrate-here`'s link measurement: messages through the
// runtime's own communicator (its progress thread included), as a run's collectives see them.
#include <algorithm>
#include <cstddef>
#include <chrono>
#include <limits>
#include <vector>

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

// Repetitions per size: enough for a best case at the small sizes, fewer for the large.
int repetitions(size_t bytes) { return bytes <= (size_t{1} << 16) ? 200 : bytes <= (size_t{1} << 22) ? 40 : 10; }

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
    double best = std::numeric_limits<double>::max();
    for (int r = 0; r < repetitions(bytes); ++r) {
      const auto t0 = Clock::now();
      if (rank == 0) {
        world->send(buffer.data(), count, DType::F32, peer)->wait();
        world->recv(buffer.data(), count, DType::F32, peer)->wait();
      } else {
        world->recv(buffer.data(), count, DType::F32, peer)->wait();
        world->send(buffer.data(), count, DType::F32, peer)->wait();
      }
      best = std::min(best, elapsed(t0) / 2);
    }
    world->barrier()->wait();
    double reduce = std::numeric_limits<double>::max();
    for (int r = 0; r < repetitions(bytes); ++r) {
      const auto t0 = Clock::now();
      world->all_reduce(buffer.data(), count, DType::F32, dist::ReduceOp::Sum)->wait();
      reduce = std::min(reduce, elapsed(t0));
    }
    result["bytes"].push_back(static_cast<double>(bytes));
    result["one_way_seconds"].push_back(best);
    result["all_reduce_seconds"].push_back(reduce);
  }
  world->barrier()->wait();
  if (rank == 0) write_file_atomically(out, result.dump());
}

}  // namespace tessera::cli
