// What the [B, T, C] activation layout costs sequence parallelism. A rank's part of a microbatch
// is T/t positions of each of its B sequences; the collectives want one contiguous block per rank,
// which [B, T, C] gives only when B = 1, so SequenceParallelRegion packs the parts into rank order
// before a reduce-scatter and unpacks them after an all-gather (parallel/tensor_parallel.h). A
// [T, B, C] layout would need neither copy. This times, on the group of all ranks, interleaved and
// as medians of the slowest rank:
//   - the all-gather and the reduce-scatter of B·T·C values alone (the [T, B, C] layout's cost),
//   - the same with the unpacking or packing copy (this engine's),
// and prints the copies' share, then one line
//   RESULT sequence_layout B=… T=… C=… tp=… gather_overhead=… scatter_overhead=…
// (overhead: packed time / contiguous time − 1).
//
//   mpirun -n 2 --bind-to none sequence_layout [--batch 16] [--seq 128] [--channels 256] [--reps 21]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "dist/mpi_runtime.h"
#include "parallel/tensor_parallel.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest rank's time of fn, after a barrier.
template <class Fn>
double timed(dist::Communicator& world, Fn&& fn) {
  world.barrier()->wait();
  const auto t0 = Clock::now();
  fn();
  // float carries the times to well under a microsecond, the resolution that matters here.
  float seconds = std::chrono::duration<float>(Clock::now() - t0).count();
  world.all_reduce(std::span(&seconds, 1), dist::ReduceOp::Max)->wait();
  return static_cast<double>(seconds);
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  CLI::App app{"sequence-parallel layout: packing copies against the collectives"};
  int B = 16, T = 128, C = 256, reps = 21;
  app.add_option("--batch", B, "sequences per microbatch")->check(CLI::PositiveNumber);
  app.add_option("--seq", T, "positions per sequence (a multiple of the ranks)")->check(CLI::PositiveNumber);
  app.add_option("--channels", C, "model width")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed rounds")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<dist::Communicator> world = mpi.world();
  const int t = world->size();
  if (T % t != 0) {
    if (world->rank() == 0) fmt::print(stderr, "--seq {} is no multiple of the {} ranks\n", T, t);
    return 2;
  }
  const int64_t Ts = T / t;
  const size_t part = static_cast<size_t>(B) * static_cast<size_t>(Ts) * static_cast<size_t>(C);
  std::vector<float> mine(part, 1.0f), packed(part * static_cast<size_t>(t)), whole(packed.size(), 1.0f);
  std::vector<double> gather, gather_unpack, scatter, pack_scatter;
  for (int r = 0; r <= reps; ++r) {  // round 0 warms up
    const double g = timed(*world, [&] { world->all_gather(mine.data(), packed.data(), part, DType::F32)->wait(); });
    const double gu = timed(*world, [&] {
      world->all_gather(mine.data(), packed.data(), part, DType::F32)->wait();
      parallel::unpack_sequence_parts(whole.data(), packed.data(), t, B, Ts, C, sizeof(float));
    });
    const double s = timed(*world, [&] {
      world->reduce_scatter(packed.data(), mine.data(), part, DType::F32, dist::ReduceOp::Sum)->wait();
    });
    const double ps = timed(*world, [&] {
      parallel::pack_sequence_parts(packed.data(), whole.data(), t, B, Ts, C, sizeof(float));
      world->reduce_scatter(packed.data(), mine.data(), part, DType::F32, dist::ReduceOp::Sum)->wait();
    });
    if (r == 0) continue;
    gather.push_back(g);
    gather_unpack.push_back(gu);
    scatter.push_back(s);
    pack_scatter.push_back(ps);
  }
  if (world->rank() == 0) {
    const double g = median(gather), gu = median(gather_unpack), s = median(scatter), ps = median(pack_scatter);
    fmt::print("sequence parts of [B {}, T {}, C {}] over {} ranks, {:.2f} MiB per rank, medians of {} rounds:\n", B, T,
               C, t, static_cast<double>(part) * 4.0 / 1048576.0, reps);
    fmt::print("  all-gather      {:8.3f} ms, with the unpacking copy {:8.3f} ms\n", g * 1e3, gu * 1e3);
    fmt::print("  reduce-scatter  {:8.3f} ms, with the packing copy   {:8.3f} ms\n", s * 1e3, ps * 1e3);
    fmt::print("RESULT sequence_layout B={} T={} C={} tp={} gather_overhead={:.3f} scatter_overhead={:.3f}\n", B, T, C,
               t, gu / g - 1.0, ps / s - 1.0);
  }
  return 0;
}
