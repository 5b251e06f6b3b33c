// Gradient compressors under mpirun (2 and 4 ranks), each against the dense sum of every rank's
// gradient, which every rank can compute here because the gradients are synthetic functions of
// (rank, element):
//  - exact where it must be: top-k at ratio 1; PowerSGD on matrices whose sum has rank ≤ r; QSGD
//    within one level of each rank's norm;
//  - error feedback keeps exactly what was not sent: the decompressed sum plus every rank's error
//    equals the sum of the gradients (top-k, 1-bit, PowerSGD);
//  - QSGD is unbiased: the mean over many steps approaches the sum (a 5σ bound, fixed seed), and
//    two compressors of the same seed round identically;
//  - the bytes each rank sends, by the communicator's counters, equal the compressor's formula;
//  - in training (the engine, dp = ranks, ZeRO 0-2): top-k at ratio 1 matches the uncompressed run
//    to 1e-5; with each compressor the warm-up steps are exact and the run stays within 0.5% of
//    the dense run's loss while its parameters differ.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "../common/rank_checks.h"
#include "core/rng.h"
#include "dist/mpi_runtime.h"
#include "parallel/compression/compressor.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::parallel;
using tessera::testing::RankChecks;

namespace {

// Rank r's gradient element i.
float gradient(int r, int64_t i, uint64_t stream = 7) { return normal(99, stream + static_cast<uint64_t>(r), static_cast<uint64_t>(i)); }

std::vector<float> local(int r, int64_t n, uint64_t stream = 7) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = gradient(r, i, stream);
  return g;
}

std::vector<double> dense_sum(int ranks, int64_t n, uint64_t stream = 7) {
  std::vector<double> s(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] += gradient(r, i, stream);
  }
  return s;
}

double worst_difference(std::span<const float> got, std::span<const double> want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  return worst;
}

// The sum over the group of every rank's error-feedback state of bucket 0.
std::vector<float> summed_error(GradientCompressor& c, dist::Communicator& comm, const std::string& name) {
  for (auto& [key, tensor] : c.state()) {
    if (key == name) {
      std::vector<float> e(tensor.data<float>(), tensor.data<float>() + tensor.numel());
      comm.all_reduce(e.data(), e.size(), DType::F32, dist::ReduceOp::Sum)->wait();
      return e;
    }
  }
  TS_FAIL("no state '{}'", name);
}

std::unique_ptr<GradientCompressor> make(CompressionMethod method, BucketShape shape, MemoryAccountant& memory, int rank,
                                         double ratio = 0.1, int levels = 127, int power_rank = 4) {
  CompressionOptions o;
  o.method = method;
  o.ratio = ratio;
  o.levels = levels;
  o.rank = power_rank;
  o.seed = 5;
  return make_compressor(o, {std::move(shape)}, memory, rank);
}

// Reduces one bucket and checks the bytes the counters saw against the formula.
std::vector<float> reduce_counted(GradientCompressor& c, std::vector<float> g, dist::Communicator& comm, RankChecks& t,
                                  const std::string& what) {
  c.begin_step();
  const uint64_t before = comm.stats().bytes_sent;
  c.reduce(0, g, comm);
  const uint64_t sent = comm.stats().bytes_sent - before;
  const uint64_t want = c.wire_bytes(0, comm.size(), comm.rank());
  t.expect(sent == want, fmt::format("{}: sent {} bytes, the formula says {}", what, sent, want));
  return g;
}

void check_compressors(dist::Communicator& comm, RankChecks& t) {
  const int R = comm.size(), me = comm.rank();
  MemoryAccountant memory;
  const int64_t n = 1000;
  const std::vector<double> want = dense_sum(R, n);
  // Top-k at ratio 1 sends everything: the sum itself (in rank order, as the reference).
  {
    auto c = make(CompressionMethod::TopK, {n, {}}, memory, me, 1.0);
    const std::vector<float> got = reduce_counted(*c, local(me, n), comm, t, "topk ratio 1");
    t.expect(worst_difference(got, want) < 1e-5, fmt::format("topk ratio 1: off the sum by {}", worst_difference(got, want)));
  }
  // Error feedback: what was sent plus what every rank kept is the sum, for top-k and 1-bit.
  for (auto [method, key] : {std::pair{CompressionMethod::TopK, "topk.residual.0"},
                             std::pair{CompressionMethod::OneBit, "onebit.residual.0"}}) {
    auto c = make(method, {n, {}}, memory, me, 0.05);
    const std::vector<float> got = reduce_counted(*c, local(me, n), comm, t, std::string(compression_name(method)));
    const std::vector<float> kept = summed_error(*c, comm, key);
    std::vector<float> total(got.size());
    for (size_t i = 0; i < got.size(); ++i) total[i] = got[i] + kept[i];
    t.expect(worst_difference(total, want) < 1e-4,
             fmt::format("{}: sent + kept is off the sum by {}", compression_name(method), worst_difference(total, want)));
    t.expect(worst_difference(got, want) > 1e-2, fmt::format("{}: compressed yet exact?", compression_name(method)));
    // A second step sends part of what the first kept: the error stays bounded.
    const std::vector<float> again = reduce_counted(*c, local(me, n, 8), comm, t, "second step");
    t.expect(std::isfinite(again[0]), "second step finite");
  }
  // Top-k's ratio ramps from 1 to its target over as many steps as the dense warm-up, then stays.
  {
    CompressionOptions o;
    o.method = CompressionMethod::TopK;
    o.ratio = 0.01;
    o.warmup_steps = 4;
    auto c = make_compressor(o, {BucketShape{n, {}}}, memory, me);
    const auto sent_at = [&](int64_t step) {
      c->set_step(step);
      return c->wire_bytes(0, R, me) / (2 * 4 * static_cast<uint64_t>(R - 1));  // k, from 2 (R - 1) k 4 bytes
    };
    t.expect(sent_at(5) == static_cast<uint64_t>(std::ceil(std::pow(0.01, 0.25) * n)), "topk ramp: first step");
    t.expect(sent_at(6) == static_cast<uint64_t>(std::ceil(std::pow(0.01, 0.5) * n)), "topk ramp: second step");
    t.expect(sent_at(8) == 10 && sent_at(100) == 10, "topk ramp: the target ratio from the ramp's end on");
  }
  // QSGD: within one level of the norm per rank; the same seed rounds the same; unbiased.
  {
    const std::vector<float> g = local(me, n);
    double norm2 = 0;
    for (float x : g) norm2 += double(x) * x;
    std::vector<double> norms{std::sqrt(norm2)};
    norms = sum_over_ranks(&comm, norms);  // Σ_r ‖g_r‖ bounds the error of the sum
    auto a = make(CompressionMethod::Qsgd, {n, {}}, memory, me, 0.1, 127);
    auto b = make(CompressionMethod::Qsgd, {n, {}}, memory, me, 0.1, 127);
    const std::vector<float> ga = reduce_counted(*a, g, comm, t, "qsgd");
    const std::vector<float> gb = reduce_counted(*b, g, comm, t, "qsgd again");
    t.expect(ga == gb, "qsgd: two compressors of one seed round differently");
    t.expect(worst_difference(ga, want) <= norms[0] / 127 * 1.0001,
             fmt::format("qsgd: off the sum by {}, more than a level ({})", worst_difference(ga, want), norms[0] / 127));
    // Unbiased: two levels, so each step's error is large; the mean of 400 steps is within 5σ.
    auto coarse = make(CompressionMethod::Qsgd, {64, {}}, memory, me, 0.1, 2);
    const std::vector<double> want64 = dense_sum(R, 64);
    std::vector<double> mean(64, 0.0);
    const int steps = 400;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> x = local(me, 64);
      coarse->begin_step();
      coarse->reduce(0, x, comm);
      for (size_t i = 0; i < 64; ++i) mean[i] += x[i] / steps;
    }
    std::vector<float> local64 = local(me, 64);
    double norm64 = 0;
    for (float x : local64) norm64 += double(x) * x;
    std::vector<double> level{std::sqrt(norm64) / 2};
    level = sum_over_ranks(&comm, level);
    // Each rank's rounding of an element has variance ≤ level²/4; 5σ of the mean of `steps`.
    const double bound = 5 * level[0] / 2 / std::sqrt(double(steps));
    double worst = 0;
    for (size_t i = 0; i < 64; ++i) worst = std::max(worst, std::abs(mean[i] - want64[i]));
    t.expect(worst < bound, fmt::format("qsgd is biased: the mean of {} steps is off by {} (5σ = {})", steps, worst, bound));
  }
  // PowerSGD: rank-1 gradients on R ranks sum to rank ≤ R, which rank R recovers; vectors exact.
  {
    const int64_t rows = 32, cols = 24, vec = 10;
    BucketShape shape{rows * cols + vec, {{vec, rows, cols}}};
    std::vector<float> g(static_cast<size_t>(shape.elements));
    std::vector<double> sum(g.size(), 0.0);
    for (int r = 0; r < R; ++r) {
      for (int64_t i = 0; i < vec; ++i) sum[static_cast<size_t>(i)] += gradient(r, i);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const double x = double(gradient(r, 1000 + i)) * gradient(r, 2000 + j);
          sum[static_cast<size_t>(vec + i * cols + j)] += x;
          if (r == me) g[static_cast<size_t>(vec + i * cols + j)] = static_cast<float>(x);
        }
      }
      if (r == me) {
        for (int64_t i = 0; i < vec; ++i) g[static_cast<size_t>(i)] = gradient(r, i);
      }
    }
    auto full = make(CompressionMethod::PowerSgd, shape, memory, me, 0.1, 127, R);
    std::vector<float> got = reduce_counted(*full, g, comm, t, "powersgd");
    t.expect(worst_difference(got, sum) < 1e-3, fmt::format("powersgd rank {}: off the rank-{} sum by {}", R, R,
                                                            worst_difference(got, sum)));
    auto low = make(CompressionMethod::PowerSgd, shape, memory, me, 0.1, 127, 1);
    got = reduce_counted(*low, g, comm, t, "powersgd rank 1");
    const std::vector<float> kept = summed_error(*low, comm, "powersgd.residual.0");
    std::vector<float> total(got.size());
    for (size_t i = 0; i < got.size(); ++i) total[i] = got[i] + kept[i];
    t.expect(worst_difference(total, sum) < 1e-3, fmt::format("powersgd rank 1: sent + kept is off the sum by {}",
                                                              worst_difference(total, sum)));
    t.expect(worst_difference(std::span(got).first(vec), std::span(sum).first(vec)) < 1e-5, "powersgd: vectors exact");
    // After a dense warm-up of 4 steps the rank ramps down as top-k's ratio does: the share of the
    // matrix sent, k (rows + cols) / (rows·cols), from 1 to rank 1's over 4 steps. 32 × 24 sends
    // 56 elements a rank: the ramp starts at ⌊768 / 56⌋ = 13 and its first step sends
    // ⌊(56 / 768)^(1/4) · 768 / 56⌋ = 7.
    CompressionOptions o;
    o.method = CompressionMethod::PowerSgd;
    o.rank = 1;
    o.warmup_steps = 4;
    o.seed = 5;
    auto ramped = make_compressor(o, {shape}, memory, me);
    const auto bytes_at = [&](int64_t step) {
      ramped->set_step(step);
      return ramped->wire_bytes(0, R, me);
    };
    const auto bytes_of_rank = [&](int64_t k) {
      return dist::all_reduce_bytes(static_cast<size_t>(vec), 4, R) +
             dist::all_reduce_bytes(static_cast<size_t>(rows * k), 4, R) +
             dist::all_reduce_bytes(static_cast<size_t>(cols * k), 4, R);
    };
    t.expect(bytes_at(5) == bytes_of_rank(7), fmt::format("powersgd ramp: {} bytes in its first step, rank 7 sends {}",
                                                          bytes_at(5), bytes_of_rank(7)));
    t.expect(bytes_at(8) == bytes_of_rank(1) && bytes_at(100) == bytes_of_rank(1),
             "powersgd ramp: the final rank from the ramp's end on");
    ramped->set_step(4);
    got = reduce_counted(*ramped, g, comm, t, "powersgd ramp, rank 7");
    const std::vector<float> kept7 = summed_error(*ramped, comm, "powersgd.residual.0");
    for (size_t i = 0; i < got.size(); ++i) total[i] = got[i] + kept7[i];
    t.expect(worst_difference(total, sum) < 1e-3, fmt::format("powersgd ramp: sent + kept is off the sum by {}",
                                                              worst_difference(total, sum)));
    t.expect(worst_difference(got, sum) < 1e-3, fmt::format("powersgd ramp: rank 7 >= R recovers the rank-{} sum "
                                                            "(off by {})", R, worst_difference(got, sum)));
  }
}

void check_training(dist::Communicator& comm, RankChecks& t) {
  using tessera::testing::ParityCase;
  for (int zero_stage : {0, 1, 2}) {
    ParityCase c;
    c.model = tessera::testing::gpt2_odd_config();
    c.zero_stage = zero_stage;
    c.steps = 8;
    c.grad_clip = 0;
    const tessera::testing::RunRecord dense = tessera::testing::run_data_parallel(c, &comm);
    ParityCase all = c;
    all.compression.method = CompressionMethod::TopK;
    all.compression.ratio = 1.0;
    const tessera::testing::RunRecord everything = tessera::testing::run_data_parallel(all, &comm);
    for (size_t s = 0; s < dense.steps.size(); ++s) {
      t.expect(std::abs(everything.steps[s].loss - dense.steps[s].loss) <= 1e-5 * dense.steps[s].loss,
               fmt::format("ZeRO-{} topk ratio 1: step {} loss {} vs {}", zero_stage, s + 1, everything.steps[s].loss,
                           dense.steps[s].loss));
    }
    for (CompressionMethod method : {CompressionMethod::TopK, CompressionMethod::Qsgd, CompressionMethod::OneBit,
                                     CompressionMethod::PowerSgd}) {
      ParityCase k = c;
      k.compression.method = method;
      k.compression.ratio = 0.1;
      k.compression.rank = 2;
      k.compression.warmup_steps = 2;
      const tessera::testing::RunRecord run = tessera::testing::run_data_parallel(k, &comm);
      const std::string what = fmt::format("ZeRO-{} {}", zero_stage, compression_name(method));
      for (size_t s = 0; s < 2; ++s) {
        t.expect(std::abs(run.steps[s].loss - dense.steps[s].loss) <= 1e-5 * dense.steps[s].loss,
                 fmt::format("{}: warm-up step {} is not exact ({} vs {})", what, s + 1, run.steps[s].loss,
                             dense.steps[s].loss));
      }
      // Random batches each step: the loss tracks the dense run's rather than falling; compression
      // must act (the parameters differ) without taking the run elsewhere.
      const double last = run.steps.back().loss, dense_last = dense.steps.back().loss;
      t.expect(std::abs(last - dense_last) <= 5e-3 * dense_last,
               fmt::format("{}: final loss {} vs the dense run's {}", what, last, dense_last));
      t.expect(run.params != dense.params, what + ": the parameters equal the dense run's: nothing was compressed");
      if (t.rank == 0) fmt::print("{}: losses {:.5f} -> {:.5f} (dense {:.5f})\n", what, run.steps.front().loss,
                                  run.steps.back().loss, dense.steps.back().loss);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::testing::run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    check_compressors(world, t);
    check_training(world, t);
  });
}
