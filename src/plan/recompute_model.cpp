#include "plan/recompute_model.h"

#include <algorithm>
#include <cmath>

#include "config/activation_bytes.h"
#include "core/check.h"
#include "memory/dtr.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"
#include "memory/unit_chain.h"
#include "plan/memory_model.h"
#include "plan/model_costs.h"

namespace tessera::plan {

using config::ModelConfig;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double d(int64_t v) { return static_cast<double>(v); }

// The planner's bytes are whole numbers held in doubles (products of the model's sizes, far below
// 2^53); the chain counts them in integers.
int64_t whole_bytes(double bytes) { return static_cast<int64_t>(std::llround(bytes)); }

DType activation_dtype(Precision p) { return p == Precision::Bf16 ? DType::BF16 : DType::F32; }

int layers_per_chunk(const ModelConfig& m, const Layout& l) {
  const int64_t chunks = int64_t{l.pp} * l.virtual_stages;
  TS_CHECK(chunks >= 1 && m.n_layer % chunks == 0,
           "plan: pp={} x v={} model chunks must divide model.n_layer={} to build a chunk's recompute chain; pick pp x v "
           "that divides the layers",
           l.pp, l.virtual_stages, m.n_layer);
  return static_cast<int>(m.n_layer / chunks);
}

// The schedule the chain gets. The cost model does not run Checkmate's MILP for every layout it
// weighs: it takes the cheaper of Rotor's schedule and DTR's, both schedules Checkmate's program
// holds, so an upper bound on its cost that DTR's selective keeps bring close (on GPT-2 124M within
// 1.44 times its extra compute, docs/benchmarks.md). `tessera plan --config` solves the run's own
// program instead (train/planned_run.cpp).
memory::ChainSchedule planned_schedule(config::RecomputePolicy policy, std::span<const memory::ChainUnit> chain,
                                       int every_k, int64_t budget) {
  if (policy != config::RecomputePolicy::Checkmate) return memory::plan_recompute(policy, chain, every_k, budget);
  memory::ChainSchedule rotor = memory::plan_recompute(config::RecomputePolicy::Optimal, chain, every_k, budget);
  memory::DtrRun dtr = memory::dtr_run(chain, budget);
  if (dtr.fits && memory::simulate(chain, dtr.schedule).time < memory::simulate(chain, rotor).time) {
    return std::move(dtr.schedule);
  }
  return rotor;
}

// To the nearest byte, so that the minimum named in MiB (rounded up to 1/100) reads back as at
// least the bytes it came from. Past int64 (some 8.6e12 MiB) a budget limits nothing anyway.
int64_t budget_bytes(const Layout& l) { return whole_bytes(std::min(l.activation_budget_mb * kMiB, 9.0e18)); }

// The least budget every stage accepts (every rank runs with the one budget): the first's and the
// last's chain minimum (the policy's: DTR needs more than the optimal schedules) plus the bytes they
// hold outside it.
int64_t minimum_chain_budget(const ModelConfig& m, const Layout& l) {
  int64_t least = 0;
  for (int stage : {0, l.pp - 1}) {
    const std::vector<memory::ChainUnit> chain = chunk_chain(m, l, stage);
    const int64_t chain_least =
        l.recompute == config::RecomputePolicy::Dtr ? memory::dtr_minimum_budget(chain) : memory::minimum_budget(chain);
    least = std::max(least, chain_least + whole_bytes(stage_edge_bytes(m, l, stage)));
  }
  return least;
}

// Up to 1/100 MiB, so that the printed minimum, given back as the budget, is accepted.
double mib_rounded_up(int64_t bytes) { return std::ceil(d(bytes) / kMiB * 100.0) / 100.0; }

std::vector<memory::ChainUnit> megatron_chain(const ModelConfig& m, const Layout& l) {
  const int layers = layers_per_chunk(m, l);
  const int64_t b = l.micro_batch;
  const double e = element_bytes(l.precision);
  const double input = e * d(b) * m.seq_len * m.n_embd / (l.sp ? l.tp : 1);
  const double everything = layer_activation_bytes(m, b, l.tp, l.sp, config::RecomputePolicy::None, l.flash_attention, l.precision);
  const bool selective = l.recompute == config::RecomputePolicy::Selective;
  const double kept = selective ? layer_activation_bytes(m, b, l.tp, l.sp, config::RecomputePolicy::Selective, l.flash_attention, l.precision)
                                : everything;
  // Uniform layers: the forward FLOPs are all the optimal solver needs of time (only ratios matter),
  // and a backward costs twice its forward (each matmul's two gradient products).
  const double forward = layer_forward_flops(m, b);
  std::vector<memory::ChainUnit> chain;
  for (int i = 0; i < layers; ++i) {
    memory::ChainUnit u;
    u.input_bytes = whole_bytes(input);
    u.own_bytes = whole_bytes(kept - input);
    u.backward_extra_bytes = whole_bytes(everything - kept);
    u.output_bytes = i + 1 < layers ? whole_bytes(input) : 0;
    u.forward_time = forward;
    u.backward_time = 2 * forward;
    chain.push_back(u);
  }
  chain.push_back(memory::ChainUnit{});  // the loss unit: the boundary or the head, counted outside
  return chain;
}

// The runtime's chain (exec::stage_chain) from the engine's own unit bytes: the chunk's blocks,
// closed by the head on the stage that holds it, else by the last block, whose output is sent on
// (the chain's last unit keeps no output). The embedding stays out: it is never recomputed and its
// token ids are counted per microbatch (embedding_activation_bytes).
std::vector<memory::ChainUnit> engine_chain(const ModelConfig& m, const Layout& l, int stage) {
  const int layers = layers_per_chunk(m, l);
  const std::vector<config::UnitActivationBytes> bytes =
      config::unit_activation_bytes(m, l.micro_batch, m.seq_len, l.tp, l.sp, activation_dtype(l.precision));
  // The blocks of the stage's first chunk under the even split (unit 1 + i is block i): blocks
  // differ when some are MoE (model.moe_every), and the stage's other chunks are taken to hold the
  // same mix, as they do when moe_every divides the blocks of a chunk. The last stage's head reads
  // the last block's output.
  std::vector<int> units;
  for (int i = 0; i < layers; ++i) units.push_back(1 + stage * layers + i);
  const bool holds_head = stage == l.pp - 1;
  if (holds_head) units.push_back(m.n_layer + 1);
  // The FLOP model's times: a block's forward, the head's [C, V/t] product; a backward twice its
  // forward.
  std::vector<double> forward(bytes.size(), layer_forward_flops(m, l.micro_batch));
  forward.back() = 2.0 * static_cast<double>(l.micro_batch) * m.seq_len * m.n_embd * m.vocab_size / l.tp;
  std::vector<double> backward(forward.size());
  for (size_t u = 0; u < forward.size(); ++u) backward[u] = 2 * forward[u];
  std::vector<double> rebuild(forward.size(), 0.0);
  for (int layer = 0; layer < m.n_layer; ++layer) {
    rebuild[static_cast<size_t>(layer) + 1] = config::rebuild_flops(m, layer, l.micro_batch, m.seq_len);
  }
  return memory::chain_of_units(bytes, units, l.recompute == config::RecomputePolicy::Selective, forward, backward,
                                rebuild, !holds_head);
}

}  // namespace

bool recompute_uses_chain(config::RecomputePolicy r) { return r == config::RecomputePolicy::EveryK || config::recompute_takes_budget(r); }

int resolved_recompute_every(const ModelConfig& m, const Layout& l) {
  if (l.recompute_every > 0) return l.recompute_every;
  // The runtime's default for the layers one chain holds.
  return config::default_every_k(layers_per_chunk(m, l));
}

std::vector<memory::ChainUnit> chunk_chain(const ModelConfig& m, const Layout& l, int stage) {
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  return l.activations == ActivationAccounting::Engine ? engine_chain(m, l, stage) : megatron_chain(m, l);
}

double embedding_activation_bytes(const ModelConfig& m, const Layout& l) {
  if (l.activations == ActivationAccounting::Engine) {
    return static_cast<double>(config::unit_activation_bytes(m, l.micro_batch, m.seq_len, l.tp, l.sp).front().own);
  }
  if (m.dropout <= 0) return 0;
  return d(l.micro_batch) * m.seq_len * m.n_embd / (l.sp ? l.tp : 1);  // one-byte dropout mask
}

double head_activation_bytes(const ModelConfig& m, const Layout& l) {
  if (l.activations == ActivationAccounting::Engine) return 0;  // the head is the last stage's chain unit
  const double e = element_bytes(l.precision);
  const double b = d(l.micro_batch), s = m.seq_len, t = l.tp;
  const double R = b * s * m.n_embd / (l.sp ? t : 1);
  // Final norm input and head input, plus the fp32 probabilities the loss backward reads.
  return 2 * e * R + 4 * b * s * std::ceil(m.vocab_size / t);
}

double stage_edge_bytes(const ModelConfig& m, const Layout& l, int stage) {
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  double bytes = 0;
  if (stage == 0) bytes += embedding_activation_bytes(m, l);
  if (stage == l.pp - 1) bytes += head_activation_bytes(m, l);
  return bytes;
}

double minimum_activation_budget_mb(const ModelConfig& m, const Layout& l) {
  return mib_rounded_up(minimum_chain_budget(m, l));
}

ChunkRecompute chunk_recompute(const ModelConfig& m, const Layout& l, int stage) {
  ChunkRecompute r;
  r.chain = chunk_chain(m, l, stage);
  r.every_k = resolved_recompute_every(m, l);
  if (config::recompute_takes_budget(l.recompute)) {
    TS_CHECK(l.activation_budget_mb > 0,
             "plan: recompute={} needs activation_budget_mb=X, the activation peak in MiB one microbatch may reach on "
             "a rank; add it to the layout, or pick another policy", config::recompute_policy_name(l.recompute));
    const int64_t least = minimum_chain_budget(m, l);
    TS_CHECK(budget_bytes(l) >= least,
             "plan: activation_budget_mb={} is below the minimum of {:.2f} MiB that a microbatch (mb={}) needs on a "
             "rank of this layout with recompute={} (its {} layers per model chunk recomputed as much as it can, plus the embedding's and "
             "head's tensors); raise activation_budget_mb to at least {:.2f}, or lower mb, or split the layers further "
             "(more tp with sp, more pp)",
             l.activation_budget_mb, mib_rounded_up(least), l.micro_batch, config::recompute_policy_name(l.recompute),
             layers_per_chunk(m, l), mib_rounded_up(least));
    r.budget_bytes = budget_bytes(l) - whole_bytes(stage_edge_bytes(m, l, stage));
  }
  r.schedule = planned_schedule(l.recompute, r.chain, r.every_k, r.budget_bytes);
  r.simulation = memory::simulate(r.chain, r.schedule);
  return r;
}

StageRecomputation stage_recomputation(const ModelConfig& m, const Layout& l, int stage) {
  if (l.recompute == config::RecomputePolicy::Full) return {.layer_forwards = static_cast<double>(m.n_layer / l.pp)};
  if (!recompute_uses_chain(l.recompute)) return {};
  const memory::ChainSimulation sim = chunk_recompute(m, l, stage).simulation;
  const double chunks = l.virtual_stages;
  return {.layer_forwards = chunks * sim.recomputed_forwards, .rebuilt_layers = chunks * sim.rebuilds};
}

double recomputed_layer_forwards(const ModelConfig& m, const Layout& l, int stage) {
  return stage_recomputation(m, l, stage).layer_forwards;
}

double rebuilt_layers(const ModelConfig& m, const Layout& l, int stage) {
  return stage_recomputation(m, l, stage).rebuilt_layers;
}

double model_recomputed_layer_forwards(const ModelConfig& m, const Layout& l) {
  if (l.recompute == config::RecomputePolicy::Full) return static_cast<double>(m.n_layer);
  if (!recompute_uses_chain(l.recompute)) return 0;
  // Stages differ only by the embedding and head bytes their budget leaves: the first, the last,
  // and the pp - 2 in between alike.
  double sum = recomputed_layer_forwards(m, l, 0);
  if (l.pp > 1) sum += recomputed_layer_forwards(m, l, l.pp - 1);
  if (l.pp > 2) sum += (l.pp - 2) * recomputed_layer_forwards(m, l, 1);
  return sum;
}

}  // namespace tessera::plan
