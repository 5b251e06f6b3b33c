// Every optimizer under ZeRO against the one-process optimizer, under mpirun (2 and 4 ranks):
//  - exactness of the optimizer itself: each rank updates an uneven contiguous shard of the flat
//    buffer (cutting matrices, rows and 8-bit blocks) with the per-tensor statistics reduced over
//    the group, and its shard equals the same elements of the whole update run on one process —
//    bit for bit for the elementwise and 8-bit optimizers (block maxima are exact), within 1e-6
//    relative where a norm or a row sum adds partial sums in another order (LAMB, LARS, Adafactor);
//  - the training engine at ZeRO 1, 2 and 3: losses and parameters against the one-process run (the
//    tolerance of the ZeRO parity test: gradients are reduced in another order), and the state
//    bytes the allocator holds under 'optimizer' equal to the optimizer's formula;
//  - the statistics optimizers pipelined (pp 2; dp 2 × pp 2 with ZeRO-1 on four ranks), the tied
//    embedding updated on two stages, against the one-process run.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "dist/mesh.h"
#include "dist/mpi_runtime.h"
#include "optim/make_optimizer.h"
#include "parallel/rank_sum.h"
#include "parallel/shard_reduction.h"
#include "parity_harness.h"
#include "../common/rank_checks.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

struct OptimizerCase {
  optim::OptimizerConfig config;
  bool bitwise = false;  // elementwise or maxima only: the shards give the whole run's bits
  // Reads whole-tensor statistics: the same shards without the reduction must differ (else the
  // comparison would prove nothing about it).
  float lr = 1e-2f;
  bool per_tensor() const { return config.kind != optim::OptimizerKind::AdamW && config.kind != optim::OptimizerKind::Sgd; }
};

std::vector<OptimizerCase> optimizer_cases() {
  std::vector<OptimizerCase> out;
  auto add = [&](const std::string& name, bool bitwise, float lr, auto tweak) {
    OptimizerCase c;
    c.config.kind = optim::parse_optimizer_kind(name);
    c.bitwise = bitwise;
    c.lr = lr;
    tweak(c.config);
    out.push_back(c);
  };
  add("adamw", true, 1e-2f, [](optim::OptimizerConfig&) {});
  add("sgd", true, 5e-2f, [](optim::OptimizerConfig& c) { c.momentum = 0.9f, c.nesterov = true; });
  add("adam8bit", true, 1e-2f, [](optim::OptimizerConfig& c) { c.block_size = 64; });
  add("adam8bit", true, 1e-2f, [](optim::OptimizerConfig& c) { c.block_size = 100, c.quantization = "linear"; });
  add("lamb", false, 1e-2f, [](optim::OptimizerConfig&) {});
  add("lars", false, 1.0f, [](optim::OptimizerConfig& c) { c.momentum = 0.9f; });
  add("adafactor", false, 1e-2f, [](optim::OptimizerConfig&) {});
  add("adafactor", false, 1e-2f, [](optim::OptimizerConfig& c) { c.first_moment = true, c.relative_step = true; });
  return out;
}

std::string describe(const optim::OptimizerConfig& c) {
  return fmt::format("{} (momentum {}, block {}, {}, first moment {}, relative step {})", optim::optimizer_name(c.kind), c.momentum,
                     c.block_size, c.quantization, c.first_moment, c.relative_step);
}

void declare_tensors(nn::ParameterStore& store, MemoryAccountant& memory) {
  // Odd sizes: no shard boundary falls on a row, a tensor or a block by accident. The two large
  // matrices are quantized by adam8bit (4096 elements or more, not embeddings).
  store.declare("embed.tokens.weight", {61, 15}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.fc.weight", {97, 53}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.fc.bias", {97}, nn::ParameterRole::Bias, nn::Init::Normal, 0.5f);
  store.declare("blocks.0.ln.weight", {53}, nn::ParameterRole::NormGain, nn::Init::Ones);
  store.declare("blocks.1.proj.weight", {45, 101}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.allocate(memory);
  store.initialize(9);
}

void draw_gradients(nn::ParameterStore& store, int step) {
  std::mt19937_64 rng(77 + static_cast<uint64_t>(step));
  std::normal_distribution<float> normal(0.0f, 0.05f);
  float* g = store.flat_grads().data<float>();
  for (int64_t i = 0; i < store.numel(); ++i) g[i] = normal(rng);
}

void check_optimizer_exactness(const OptimizerCase& c, dist::Communicator& world, RankChecks& t) {
  constexpr int kSteps = 4;
  MemoryAccountant memory;
  nn::ParameterStore whole, sharded, unreduced;
  declare_tensors(whole, memory);
  declare_tensors(sharded, memory);
  declare_tensors(unreduced, memory);
  const int64_t N = whole.numel();
  const int rank = world.rank(), ranks = world.size();
  const int64_t lo = N * rank / ranks, hi = N * (rank + 1) / ranks;

  const std::vector<optim::Segment> all = optim::whole_parameters(whole);
  auto one_process = optim::make_optimizer(memory, c.config, whole, all, nullptr);
  std::array<dist::Communicator*, config::kMeshDims.size()> groups{};
  groups[static_cast<size_t>(config::MeshDim::DP)] = &world;
  parallel::GroupShardReduction reduction(groups);
  const std::vector<optim::Segment> mine = optim::segments_of_range(
      sharded, {lo, hi}, sharded.flat_values().data<float>() + lo, sharded.flat_grads().data<float>() + lo,
      1u << static_cast<uint32_t>(config::MeshDim::DP));
  auto shard = optim::make_optimizer(memory, c.config, sharded, mine, &reduction);
  const std::vector<optim::Segment> alone = optim::segments_of_range(
      unreduced, {lo, hi}, unreduced.flat_values().data<float>() + lo, unreduced.flat_grads().data<float>() + lo,
      1u << static_cast<uint32_t>(config::MeshDim::DP));
  auto shard_alone = optim::make_optimizer(memory, c.config, unreduced, alone, nullptr);
  for (int s = 0; s < kSteps; ++s) {
    draw_gradients(whole, s);
    draw_gradients(sharded, s);
    draw_gradients(unreduced, s);
    one_process->step(c.lr, all);
    shard->step(c.lr, mine);
    shard_alone->step(c.lr, alone);
  }
  if (c.per_tensor()) {
    const float* w = whole.flat_values().data<float>();
    const float* u = unreduced.flat_values().data<float>();
    // On some rank: a rank whose cut 8-bit blocks have their largest element on its side
    // quantizes them alike either way.
    const double mine_differ = std::memcmp(w + lo, u + lo, sizeof(float) * size_t(hi - lo)) != 0 ? 1.0 : 0.0;
    const double differ = parallel::sum_over_ranks(&world, std::span(&mine_differ, 1))[0];
    t.expect(differ > 0, fmt::format("{}: the shards' updates without the reduction equal the whole update too",
                                     describe(c.config)));
  }
  const float* want = whole.flat_values().data<float>();
  const float* got = sharded.flat_values().data<float>();
  double worst = 0, moved = 0;
  int64_t differing = 0;
  const float* start = nullptr;
  {
    MemoryAccountant fresh_memory;
    nn::ParameterStore fresh;
    declare_tensors(fresh, fresh_memory);
    start = fresh.flat_values().data<float>();
    for (int64_t i = lo; i < hi; ++i) moved = std::max(moved, double(std::abs(want[i] - start[i])));
  }
  for (int64_t i = lo; i < hi; ++i) {
    differing += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::max(1.0, std::abs(double(want[i]))));
  }
  t.expect(moved > 1e-4, fmt::format("{}: the weights hardly moved ({})", describe(c.config), moved));
  if (c.bitwise) {
    t.expect(differing == 0, fmt::format("{}: {} of the shard's {} elements differ from the one-process update (worst "
                                         "{:.3g}); want every bit equal",
                                         describe(c.config), differing, hi - lo, worst));
  } else {
    t.expect(worst <= 1e-6, fmt::format("{}: the shard differs from the one-process update by {:.3g} relative",
                                        describe(c.config), worst));
  }
  if (rank == 0) {
    fmt::print("{} over {} ranks: {} of {} shard elements differ from one process, worst {:.3g}\n", describe(c.config),
               ranks, differing, hi - lo, worst);
  }
}

void check_engine(const OptimizerCase& oc, int zero_stage, dist::Communicator& world, RankChecks& t) {
  ParityCase c;
  // GPT-2's attention key bias has a zero gradient up to rounding (softmax ignores a shift of
  // every score), and Adafactor's unfactored second moment (ε1 = 1e-30) turns any such gradient
  // into a unit update, so the rounding of another reduction order moves it by a whole step:
  // Adafactor's engine parity runs on the Llama model, which has no biases.
  c.model = oc.config.kind == optim::OptimizerKind::Adafactor ? llama_config() : gpt2_odd_config();
  c.zero_stage = zero_stage;
  c.micros = 2;
  c.bucket_bytes = 1024;
  c.optimizer = oc.config;
  c.lr = oc.lr;
  c.name = fmt::format("engine zero{} {}", zero_stage, describe(oc.config));
  const RunRecord ref = run_reference(c);
  const RunRecord run = run_data_parallel(c, &world);
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    const double want = ref.steps[s].loss, got = run.steps[s].loss;
    t.expect(std::abs(got - want) <= 1e-5 * std::abs(want),
             fmt::format("{}: step {} loss {:.9g} vs single-process {:.9g}", c.name, s + 1, got, want));
  }
  double worst = 0;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - ref.params[i]) / std::max(1.0, std::abs(double(ref.params[i]))));
  }
  t.expect(run.params.size() == ref.params.size() && worst <= 1e-4,
           fmt::format("{}: parameters differ from the single-process run by {:.3g}", c.name, worst));

  // The state bytes of this rank's shard, measured, against the formula over its master segments.
  MemoryAccountant memory;
  nn::GPT model(c.model, memory, c.seed);
  parallel::EngineOptions options;
  options.layout.dp = world.size();
  options.layout.zero_stage = zero_stage;
  options.layout.micro_batch = 1;
  options.layout.global_batch = world.size();
  options.optimizer = oc.config;
  options.seq_len = c.seq_len;
  options.measure_unit_times = false;
  const dist::Mesh mesh(world, options.layout);
  parallel::TrainingEngine engine(model, memory, &mesh, options);
  const auto held = static_cast<int64_t>(memory.stats().live_of(MemoryTag::Optimizer));
  const int64_t formula = optim::state_bytes(oc.config, engine.ownership().master_segments());
  t.expect(held == formula, fmt::format("{}: the optimizer holds {} bytes, the formula says {}", c.name, held, formula));
}

// Pipelined (pp = world size, or dp 2 × pp 2 with ZeRO-1 on four ranks): a tensor lives on one
// stage, except GPT-2's tied embedding, which the first and last stages both update with the summed
// gradient, so both must compute the same whole-tensor statistics.
void check_pipelined(const OptimizerCase& oc, dist::Communicator& world, RankChecks& t) {
  ParityCase c;
  c.model = oc.config.kind == optim::OptimizerKind::Adafactor ? llama_config() : gpt2_odd_config();  // see check_engine
  c.micros = 2;
  c.optimizer = oc.config;
  c.lr = oc.lr;
  RunRecord run;
  if (world.size() == 4) {
    config::ParallelLayout layout;
    layout.dp = 2;
    layout.pp = 2;
    dist::Mesh mesh(world, layout);
    c.zero_stage = 1;
    c.name = fmt::format("dp 2 x pp 2 ZeRO-1 {}", describe(oc.config));
    run = run_parallel(c, &mesh);
  } else {
    c.name = fmt::format("pp {} {}", world.size(), describe(oc.config));
    run = run_pipelined(c, world);
  }
  const RunRecord ref = run_reference(c);
  double worst = 0;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - ref.params[i]) / std::max(1.0, std::abs(double(ref.params[i]))));
  }
  t.expect(run.params.size() == ref.params.size() && worst <= 1e-4,
           fmt::format("{}: parameters differ from the single-process run by {:.3g}", c.name, worst));
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    for (const OptimizerCase& c : optimizer_cases()) check_optimizer_exactness(c, world, t);
    for (const OptimizerCase& c : optimizer_cases()) {
      for (int stage : {1, 2, 3}) check_engine(c, stage, world, t);
      if (c.per_tensor()) check_pipelined(c, world, t);
    }
  });
}
