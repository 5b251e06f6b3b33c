// 1-bit Adam under mpirun (2 and 4 ranks):
//  - the optimizer on synthetic gradients (each rank's a function of (rank, step, element), so
//    every rank can compute every other's) against a reference written here from the paper, which
//    plays all R ranks in one process: the warm-up is AdamW on the summed gradient, bit for bit;
//    the compressed steps (local momenta, worker error, chunks averaged with the server error,
//    frozen variance) match the reference within 1e-6; every rank holds the same momentum; the
//    momentum it holds differs from the exact average (compression acted); the bytes each rank
//    sends, by the communicator's counters, equal one_bit_adam_wire_bytes;
//  - in training (the engine, dp = ranks): the warm-up steps equal the AdamW run's losses exactly,
//    the reducer stops reducing after the freeze (the step's traffic is the optimizer's exchange
//    alone, equal to the formula), and the run stays within 1% of the AdamW run's loss.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "../common/rank_checks.h"
#include "core/rng.h"
#include "dist/mesh.h"
#include "nn/gpt.h"
#include "optim/adamw.h"
#include "optim/one_bit_adam.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::parallel;
using tessera::testing::RankChecks;

namespace {

constexpr size_t kBlock = 512;  // the sign compression's block (compression/methods.h)

void declare_tensors(nn::ParameterStore& store, MemoryAccountant& memory) {
  // Odd sizes: blocks and chunks straddle tensors.
  store.declare("embed.tokens.weight", {61, 15}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.fc.weight", {97, 53}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.fc.bias", {97}, nn::ParameterRole::Bias, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.ln.weight", {53}, nn::ParameterRole::NormGain, nn::Init::Ones);
  store.allocate(memory);
  store.initialize(9);
}

// Rank r's gradient at `step`: its part of the global batch's mean, so the ranks' sum is the mean.
std::vector<float> gradient_of(int r, int step, int64_t n) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    g[static_cast<size_t>(i)] = 0.05f * normal(31, static_cast<uint64_t>(step) * 64 + static_cast<uint64_t>(r),
                                               static_cast<uint64_t>(i));
  }
  return g;
}

// The paper's one-bit compression of `x` over [lo, hi): sign times the mean magnitude of each
// block of 512 (blocks counted from lo); returns C(x), leaves x − C(x) in x.
std::vector<float> compress(std::vector<float>& x, size_t lo, size_t hi) {
  std::vector<float> c(hi - lo);
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t e = std::min(hi, b + kBlock);
    double mean = 0;
    for (size_t i = b; i < e; ++i) mean += std::fabs(x[i]);
    const auto scale = static_cast<float>(mean / static_cast<double>(e - b));
    for (size_t i = b; i < e; ++i) {
      c[i - lo] = x[i] >= 0 ? scale : -scale;
      x[i] -= c[i - lo];
    }
  }
  return c;
}

struct Reference {
  std::vector<float> p, m, v;
  std::vector<std::vector<float>> worker;  // [rank]
  std::vector<std::vector<float>> server;  // [rank]: its chunk
};

// One compressed step of all R ranks.
void reference_compressed_step(Reference& ref, const optim::OptimizerConfig& cfg, int R, int step, float lr,
                               const std::vector<size_t>& chunks, const std::vector<bool>& matrix) {
  const size_t n = ref.p.size();
  std::vector<std::vector<float>> sent(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const std::vector<float> g = gradient_of(r, step, static_cast<int64_t>(n));
    std::vector<float>& e = ref.worker[static_cast<size_t>(r)];
    for (size_t i = 0; i < n; ++i) e[i] += cfg.beta1 * ref.m[i] + (1 - cfg.beta1) * (static_cast<float>(R) * g[i]);
    sent[static_cast<size_t>(r)] = compress(e, 0, n);
  }
  for (int k = 0; k < R; ++k) {
    const size_t lo = chunks[static_cast<size_t>(k)], hi = chunks[static_cast<size_t>(k) + 1];
    std::vector<float>& s = ref.server[static_cast<size_t>(k)];
    std::vector<float> shifted(n, 0.0f);  // the chunk at its place, for compress's indexing
    for (size_t i = lo; i < hi; ++i) {
      float sum = s[i - lo];
      for (int r = 0; r < R; ++r) sum += sent[static_cast<size_t>(r)][i] / static_cast<float>(R);
      shifted[i] = sum;
    }
    const std::vector<float> c = compress(shifted, lo, hi);
    for (size_t i = lo; i < hi; ++i) {
      ref.m[i] = c[i - lo];
      s[i - lo] = shifted[i];
    }
  }
  const double bias1 = 1.0 - std::pow(double(cfg.beta1), double(step));
  const double bias2 = 1.0 - std::pow(double(cfg.beta2), double(cfg.freeze_step));
  for (size_t i = 0; i < n; ++i) {
    const double decay = 1.0 - double(lr) * (matrix[i] ? cfg.weight_decay : 0.0f);
    ref.p[i] = static_cast<float>(ref.p[i] * decay -
                                  (lr / bias1) * ref.m[i] / (std::sqrt(double(ref.v[i])) / std::sqrt(bias2) + cfg.eps));
  }
}

double worst_relative(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  }
  return worst;
}

void check_optimizer(dist::Communicator& comm, RankChecks& t) {
  const int R = comm.size(), rank = comm.rank();
  constexpr int kSteps = 7;
  constexpr float kLr = 1e-2f;
  optim::OptimizerConfig cfg;
  cfg.kind = optim::OptimizerKind::OneBitAdam;
  cfg.freeze_step = 3;
  MemoryAccountant memory;
  nn::ParameterStore mine, exact;
  declare_tensors(mine, memory);
  declare_tensors(exact, memory);
  const int64_t n = mine.numel();
  const std::vector<optim::Segment> segments = optim::whole_parameters(mine);
  const std::vector<optim::Segment> exact_segments = optim::whole_parameters(exact);
  optim::OneBitAdam onebit(memory, cfg, n, &comm);
  optim::AdamW adamw(memory, optim::AdamWConfig{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}, n);
  const std::vector<size_t> chunks = optim::one_bit_adam_chunks(static_cast<size_t>(n), R);
  std::vector<bool> matrix;
  for (const optim::Segment& s : segments) matrix.insert(matrix.end(), static_cast<size_t>(s.size()), optim::is_weight(*s.param));

  float* grads = mine.flat_grads().data<float>();
  for (int step = 1; step <= kSteps; ++step) {
    const bool compressed = onebit.next_step_compressed();
    t.expect(compressed == (step > cfg.freeze_step), fmt::format("step {}: compressed {}", step, compressed));
    if (!compressed) {
      // The warm-up reads the reduced gradient: the sum of every rank's, the same on all.
      std::vector<double> sum(static_cast<size_t>(n), 0.0);
      for (int r = 0; r < R; ++r) {
        const std::vector<float> g = gradient_of(r, step, n);
        for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += g[static_cast<size_t>(i)];
      }
      for (int64_t i = 0; i < n; ++i) {
        grads[i] = static_cast<float>(sum[static_cast<size_t>(i)]);
        exact.flat_grads().data<float>()[i] = grads[i];
      }
      const dist::CommStats before = comm.stats();
      onebit.step(kLr, segments);
      t.expect(comm.stats().bytes_sent == before.bytes_sent, fmt::format("warm-up step {} sent bytes", step));
      adamw.step(kLr, exact_segments);
      t.expect(std::memcmp(mine.flat_values().data<float>(), exact.flat_values().data<float>(),
                           static_cast<size_t>(n) * sizeof(float)) == 0,
               fmt::format("warm-up step {}: not AdamW's bits", step));
      continue;
    }
    const std::vector<float> g = gradient_of(rank, step, n);
    std::copy(g.begin(), g.end(), grads);
    const dist::CommStats before = comm.stats();
    onebit.step(kLr, segments);
    const uint64_t sent = comm.stats().bytes_sent - before.bytes_sent;
    const uint64_t formula = optim::one_bit_adam_wire_bytes(static_cast<size_t>(n), R, rank);
    t.expect(sent == formula, fmt::format("step {}: sent {} bytes, the formula {}", step, sent, formula));
    t.expect(formula * 15 < 2 * 4 * static_cast<uint64_t>(n), fmt::format("step {}: {} bytes is not ~1/20 of a dense "
                                                                          "all-reduce of {} elements", step, formula, n));
  }

  // The reference: AdamW for the warm-up on the summed gradient, then the compressed steps.
  MemoryAccountant ref_memory;
  nn::ParameterStore start;
  declare_tensors(start, ref_memory);
  optim::AdamW warm(ref_memory, optim::AdamWConfig{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}, n);
  const std::vector<optim::Segment> start_segments = optim::whole_parameters(start);
  for (int step = 1; step <= cfg.freeze_step; ++step) {
    std::vector<double> sum(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < R; ++r) {
      const std::vector<float> gr = gradient_of(r, step, n);
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += gr[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < n; ++i) start.flat_grads().data<float>()[i] = static_cast<float>(sum[static_cast<size_t>(i)]);
    warm.step(kLr, start_segments);
  }
  Reference ref;
  const optim::StateDict warm_state = warm.state_dict();
  const auto vec = [&](const Tensor& x) { return std::vector<float>(x.data<float>(), x.data<float>() + x.numel()); };
  ref.p = vec(start.flat_values());
  ref.m = vec(warm_state.tensors[0].values);
  ref.v = vec(warm_state.tensors[1].values);
  ref.worker.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(n), 0.0f));
  for (int k = 0; k < R; ++k) {
    ref.server.emplace_back(chunks[static_cast<size_t>(k) + 1] - chunks[static_cast<size_t>(k)], 0.0f);
  }
  for (int step = cfg.freeze_step + 1; step <= kSteps; ++step) reference_compressed_step(ref, cfg, R, step, kLr, chunks, matrix);

  const std::span<const float> values(mine.flat_values().data<float>(), static_cast<size_t>(n));
  const double worst = worst_relative(values, ref.p);
  t.expect(worst <= 1e-6, fmt::format("parameters after {} steps differ from the reference by {}", kSteps, worst));
  const optim::StateDict state = onebit.state_dict();
  const std::span<const float> m(state.tensors[0].values.data<float>(), static_cast<size_t>(n));
  const double worst_m = worst_relative(m, ref.m);
  t.expect(worst_m <= 1e-6, fmt::format("momentum differs from the reference by {}", worst_m));
  // Every rank holds the same momentum.
  std::vector<double> spread(1, 0.0);
  for (size_t i = 0; i < m.size(); ++i) spread[0] += double(m[i]) * double(i % 7 + 1);
  const std::vector<double> total = sum_over_ranks(&comm, spread);
  t.expect(std::abs(total[0] - R * spread[0]) <= 1e-9 * std::max(1.0, std::abs(total[0])),
           "the ranks' momenta differ");
  // Compression acted: the momentum is a few levels per block, not the exact average.
  std::vector<float> exact_average(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < R; ++r) {
    const std::vector<float> gr = gradient_of(r, kSteps, n);
    for (int64_t i = 0; i < n; ++i) exact_average[static_cast<size_t>(i)] += gr[static_cast<size_t>(i)];
  }
  t.expect(worst_relative(m, exact_average) > 1e-4, "the momentum looks uncompressed");
  // A rank's own errors are its state for checkpoints.
  const auto own = onebit.rank_state_tensors();
  t.expect(own.size() == 2 && own[0].second.numel() == n &&
               own[1].second.numel() == static_cast<int64_t>(chunks[static_cast<size_t>(rank) + 1] - chunks[static_cast<size_t>(rank)]),
           "rank state: the worker error over every element and the server error over this rank's chunk");
  if (rank == 0) fmt::print("1-bit Adam against the reference over {} ranks: worst {:.2e}\n", R, worst);
}

void check_training(dist::Communicator& comm, RankChecks& t) {
  using tessera::testing::ParityCase;
  ParityCase c;
  c.model = tessera::testing::gpt2_odd_config();
  c.steps = 8;
  c.grad_clip = 0;
  const tessera::testing::RunRecord adamw = tessera::testing::run_data_parallel(c, &comm);
  for (float clip : {0.0f, 0.05f}) {
    ParityCase k = c;
    k.grad_clip = clip;
    k.optimizer.kind = optim::OptimizerKind::OneBitAdam;
    k.optimizer.freeze_step = 3;
    const tessera::testing::RunRecord dense = clip > 0 ? tessera::testing::run_data_parallel(
                                                             [&] {
                                                               ParityCase d = c;
                                                               d.grad_clip = clip;
                                                               return d;
                                                             }(),
                                                             &comm)
                                                       : adamw;
    const tessera::testing::RunRecord run = tessera::testing::run_data_parallel(k, &comm);
    const std::string what = fmt::format("1-bit Adam, clip {}", clip);
    for (size_t s = 0; s < 3; ++s) {
      t.expect(run.steps[s].loss == dense.steps[s].loss, fmt::format("{}: warm-up step {} loss {} vs AdamW's {}", what,
                                                                     s + 1, run.steps[s].loss, dense.steps[s].loss));
    }
    // After the freeze the step's traffic is the optimizer's exchange, the one-value agreement on
    // a non-finite gradient (the norm is measured, clip 0 included) and the harness's loss sum: no
    // gradient reduction.
    const int64_t n = run.numel;
    const uint64_t scalars = 2 * sum_over_ranks_bytes(1, comm.size());
    const uint64_t formula = optim::one_bit_adam_wire_bytes(static_cast<size_t>(n), comm.size(), comm.rank()) + scalars;
    for (size_t s = 3; s < run.steps.size(); ++s) {
      t.expect(run.steps[s].comm.bytes_sent == formula, fmt::format("{}: step {} sent {} bytes, the formula {}", what,
                                                                    s + 1, run.steps[s].comm.bytes_sent, formula));
    }
    const double last = run.steps.back().loss, dense_last = dense.steps.back().loss;
    t.expect(std::abs(last - dense_last) <= 1e-2 * dense_last,
             fmt::format("{}: final loss {} vs AdamW's {}", what, last, dense_last));
    t.expect(run.params != dense.params, what + ": the parameters equal AdamW's: nothing was compressed");
    if (t.rank == 0) fmt::print("{}: losses {:.5f} -> {:.5f} (AdamW {:.5f})\n", what, run.steps.front().loss, last, dense_last);
  }
}

config::PrecisionOptions fp16() {
  config::PrecisionOptions p;
  p.compute = DType::F16;
  p.loss_scaling.enabled = true;
  p.loss_scaling.init_scale = 1024;
  return p;
}

// fp16 over dp: the run tracks the fp32 1-bit Adam run, and after the freeze its traffic is still
// the optimizer's exchange with the one-value overflow agreement (no gradient is reduced).
void check_fp16_training(dist::Communicator& comm, RankChecks& t) {
  using tessera::testing::ParityCase;
  ParityCase c;
  c.model = tessera::testing::gpt2_odd_config();
  c.steps = 8;
  c.grad_clip = 0;
  c.optimizer.kind = optim::OptimizerKind::OneBitAdam;
  c.optimizer.freeze_step = 3;
  const tessera::testing::RunRecord fp32 = tessera::testing::run_data_parallel(c, &comm);
  ParityCase half = c;
  half.precision = fp16();
  const tessera::testing::RunRecord run = tessera::testing::run_data_parallel(half, &comm);
  tessera::testing::check_tracks_fp32(run, fp32, "1-bit Adam in fp16", t);
  const uint64_t scalars = 2 * sum_over_ranks_bytes(1, comm.size());
  const uint64_t formula =
      optim::one_bit_adam_wire_bytes(static_cast<size_t>(run.numel), comm.size(), comm.rank()) + scalars;
  for (size_t s = 3; s < run.steps.size(); ++s) {
    t.expect(run.steps[s].comm.bytes_sent == formula, fmt::format("1-bit Adam in fp16: step {} sent {} bytes, the "
                                                                  "formula {}", s + 1, run.steps[s].comm.bytes_sent,
                                                                  formula));
  }
}

// Every value of the optimizer's state and of this rank's own (the worker and server errors).
std::vector<float> one_bit_adam_state(parallel::TrainingEngine& engine) {
  std::vector<float> out;
  const auto append = [&](const Tensor& x) { out.insert(out.end(), x.data<float>(), x.data<float>() + x.numel()); };
  for (const optim::StateTensor& s : engine.optimizer().state_dict().tensors) append(s.values);
  for (const auto& [name, tensor] : engine.rank_local_state()->rank_state_tensors()) append(tensor);
  return out;
}

// fp16 at a scale of 1024, no clipping: a compressed step (after freeze_step 2) with an infinite
// gradient on rank 0 only is skipped on every rank before the exchange, leaving the parameters,
// the momentum and the error feedback as the step found them, and the scale halves.
void check_fp16_overflow_after_the_freeze(dist::Communicator& world, RankChecks& t) {
  config::ParallelLayout layout;
  layout.dp = world.size();
  layout.global_batch = world.size();
  dist::Mesh mesh(world, layout);
  const config::ModelConfig config = tessera::testing::gpt2_odd_config();
  MemoryAccountant memory;
  nn::GPT model(config, memory, 5);
  parallel::EngineOptions options;
  options.layout = layout;
  options.seq_len = config.seq_len;
  options.precision = fp16();
  options.optimizer.kind = optim::OptimizerKind::OneBitAdam;
  options.optimizer.freeze_step = 2;
  parallel::TrainingEngine engine(model, memory, &mesh, options);
  tessera::testing::PoisonGradient poison(engine.ownership(), model.parameters().get("embed.positions.weight"), 4,
                                          world.rank() == 0);
  engine.transforms().add(exec::TransformSlot::Observer, poison);
  std::vector<int32_t> tokens(static_cast<size_t>(config.seq_len));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + world.rank()) % 37);
  const int T = config.seq_len;
  const exec::MicrobatchInput mb{
      {nn::token_tensor(tokens.data(), 1, T), nn::token_tensor(tokens.data(), 1, T), 1.0f / static_cast<float>(T)},
      world.rank()};
  const auto values = [&] {
    const Tensor& v = model.parameters().flat_values();
    return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
  };
  std::vector<double> skipped, scales, losses;
  std::vector<float> state_before, values_before;
  for (int step = 1; step <= 5; ++step) {
    if (step == 4) {
      state_before = one_bit_adam_state(engine);
      values_before = values();
    }
    const parallel::TrainingEngine::StepResult r = engine.train_step(std::span(&mb, 1), {}, 1e-3f, std::nullopt);
    if (step == 4) {
      t.expect(one_bit_adam_state(engine) == state_before,
               "fp16 1-bit Adam: the skipped step changed the momentum or the error feedback");
      t.expect(values() == values_before, "fp16 1-bit Adam: the skipped step changed the parameters");
    }
    skipped.push_back(r.skipped ? 1.0 : 0.0);
    scales.push_back(r.loss_scale);
    losses.push_back(r.loss_sum);
  }
  const std::vector<double> total = parallel::sum_over_ranks(&world, skipped);
  const double n = world.size();
  t.expect(total == std::vector<double>{0, 0, 0, n, 0},
           fmt::format("fp16 1-bit Adam: ranks skipping each step: {}, {}, {}, {}, {} of {} (want 0, 0, 0, all, 0)",
                       total[0], total[1], total[2], total[3], total[4], n));
  t.expect(scales == std::vector<double>{1024, 1024, 1024, 1024, 512},
           fmt::format("fp16 1-bit Adam: loss scales {}, {}, {}, {}, {} (want 1024, 1024, 1024, 1024, 512)", scales[0],
                       scales[1], scales[2], scales[3], scales[4]));
  for (double l : losses) t.expect(std::isfinite(l), "fp16 1-bit Adam: a loss is not finite");
  engine.transforms().remove(exec::TransformSlot::Observer);
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::testing::run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    check_optimizer(world, t);
    check_training(world, t);
    check_fp16_training(world, t);
    check_fp16_overflow_after_the_freeze(world, t);
  });
}
