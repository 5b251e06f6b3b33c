// Tensor parallelism under mpirun (2, 4 and 8 ranks) against the single-process run on the same global
// batch:
//  - the weights at step 0, gathered from the tensor-parallel blocks, equal the one-process model's
//    bit for bit (initialization by global index; padding rows are zero and dropped);
//  - parity: losses and gradient norms within 1e-5 relative every step, parameters within 1e-4
//    after 5 steps, at tp = 2 (and 4 with 4 ranks), for GPT-2 with a tied embedding and Llama
//    untied, Llama with grouped-query attention (8 heads on 4 key/value heads), a vocabulary tp
//    divides and one it does not (padded), dropout on, 1 and 3
//    microbatches; full and selective recomputation; each model.activation on a model of the
//    other architecture's MLP or of neither (GPT-2 with ReLU, squared ReLU and SwiGLU, Llama with
//    squared ReLU), with and without selective recomputation; with 4 ranks also tp 2 × dp 2 under ZeRO 0-3,
//    and tp 2 × pp 2;
//  - the same with sequence parallelism (sp): tp = 2 and 4, sequences split in parts of T/tp, one
//    and several sequences per microbatch (the packed and the direct collectives), recomputation,
//    and with 4 ranks tp 2 × dp 2 under ZeRO 0-3 and tp 2 × pp 2;
//  - memory: every step's activation peak on every rank equals the program walk's prediction with
//    the split widths; traffic: the tensor-parallel group's all-reduces (all-gathers and
//    reduce-scatters with sp) equal the formula;
//  - PTD-P with 8 ranks: tp 2 · pp 2 · dp 2 (1F1B, ZeRO-1) and tp 2 + sp · pp 2 (interleaved, v = 2)
//    · dp 2, GPT-2 and Llama, 6 steps.
//  - the tensor-parallel blocks of every rank are what the plan says: replicated parameters equal
//    across the group, split ones a different block on each rank.
#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "dist/mesh.h"
#include "nn/gpt.h"
#include "parallel/rank_sum.h"
#include "parallel/tensor_parallel.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

config::ModelConfig gpt2_tied(int vocab) {
  config::ModelConfig m;
  m.arch = config::Architecture::Gpt2;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 16;
  m.vocab_size = vocab;
  m.seq_len = 16;
  m.dropout = 0.1f;
  return m;
}

config::ModelConfig llama_untied(int vocab) {
  config::ModelConfig m = llama_config();
  m.n_head = 4;
  m.ffn_hidden = 48;
  m.vocab_size = vocab;
  m.dropout = 0.1f;
  return m;
}

// Grouped-query attention: 8 query heads on 4 key/value heads, so tp 2 and 4 both keep whole groups.
config::ModelConfig llama_gqa(int vocab) {
  config::ModelConfig m = llama_untied(vocab);
  m.n_embd = 32;
  m.n_head = 8;
  m.n_kv_head = 4;
  return m;
}

std::string describe(const ParityCase& c, const config::ParallelLayout& layout) {
  return fmt::format("{}{}{} V{} tp{}{} dp{} pp{}{} ZeRO-{} m{} b{}", config::architecture_name(c.model.arch),
                     c.model.kv_heads() != c.model.n_head ? " GQA" : "",
                     c.model.activation ? " " + config::activation_name(*c.model.activation) : "", c.model.vocab_size,
                     layout.tp,
                     c.sequence_parallel ? "+sp" : "", layout.dp, layout.pp,
                     layout.pp > 1 ? fmt::format(" ({} v{})", config::schedule_name(c.schedule), c.virtual_stages) : "",
                     c.zero_stage, c.micros, c.global_batch / layout.dp / c.micros);
}

void check_initial_weights(const config::ModelConfig& model, dist::Communicator& tp, RankChecks& t) {
  MemoryAccountant memory;
  nn::GPT whole(model, memory, 11);
  const float* want = whole.parameters().flat_values().data<float>();
  const std::vector<float> got = initial_parameters(model, 11, tp);
  const bool same = static_cast<int64_t>(got.size()) == whole.parameters().numel() &&
                    std::memcmp(got.data(), want, got.size() * sizeof(float)) == 0;
  t.expect(same, fmt::format("{} V{} tp{}: the step-0 weights gathered from the blocks differ from the one-process "
                             "model's", config::architecture_name(model.arch), model.vocab_size, tp.size()));
}

// Split parameters hold a different block on every rank of the group, replicated ones the same.
void check_blocks(const config::ModelConfig& model, dist::Communicator& tp, RankChecks& t) {
  MemoryAccountant memory;
  const parallel::TensorParallelPlan plan(model, tp.size(), tp.rank());
  nn::GPT local(model, memory, 11, &plan);
  int split = 0;
  for (const nn::Parameter& p : local.parameters().all()) {
    const Tensor v = local.parameters().value(p);
    const float first = v.data<float>()[p.numel() / 2];
    std::vector<float> all(static_cast<size_t>(tp.size()));
    const std::vector<size_t> counts(all.size(), 1);
    tp.all_gather(&first, all.data(), counts, DType::F32)->wait();
    const bool replicated = p.spec.replicated_over(config::MeshDim::TP);
    split += !replicated;
    const bool all_equal = std::all_of(all.begin(), all.end(), [&](float x) { return x == all[0]; });
    if (p.init == nn::Init::Normal) {
      t.expect(replicated == all_equal, fmt::format("'{}' ({}): its middle element on the {} ranks: {}", p.name,
                                                    replicated ? "replicated" : "split", all.size(), fmt::join(all, ", ")));
    }
  }
  t.expect(split > 0, "the plan splits no parameter");
}

// The tensor-parallel group's traffic per step is the formula's: per microbatch of N = b·T tokens,
// all-reduces of N·C values at the embedding's exit, at each block's two exits (forward) and two
// entries (backward) and at the head's entry (backward) — 4L + 2 — plus the loss's three per-row
// statistics (N values each). Nothing else goes over the group as an all-reduce. Under pipelining
// each stage's group carries its units' part: summed over the pipeline ranks, the formula.
void check_tensor_parallel_bytes(const RunRecord& run, const ParityCase& c, const config::ParallelLayout& layout,
                                 dist::Communicator* pipeline, const std::string& what, RankChecks& t) {
  const int64_t N = int64_t{c.global_batch} / layout.dp / c.micros * c.seq_len;
  const int64_t L = c.model.n_layer, C = c.model.n_embd;
  const uint64_t ops = static_cast<uint64_t>(c.micros * (4 * L + 5));
  const uint64_t bytes = static_cast<uint64_t>(c.micros) *
                         ((4 * L + 2) * dist::all_reduce_bytes(static_cast<size_t>(N * C), 4, layout.tp) +
                          3 * dist::all_reduce_bytes(static_cast<size_t>(N), 4, layout.tp));
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const dist::OpCounter& all_reduce = run.steps[s].tensor_comm.of(dist::OpKind::AllReduce);
    const std::vector<double> mine{static_cast<double>(all_reduce.ops), static_cast<double>(all_reduce.bytes_sent)};
    const std::vector<double> total = parallel::sum_over_ranks(pipeline, mine);
    t.expect(total[0] == static_cast<double>(ops) && total[1] == static_cast<double>(bytes),
             fmt::format("{}: step {} on the tensor-parallel group: {} all-reduces sending {} bytes, the formula {} "
                         "sending {}", what, s + 1, total[0], total[1], ops, bytes));
  }
}

// With sequence parallelism the same places exchange the same sums as all-gathers (entering a
// region going forward, leaving it going back) and reduce-scatters (leaving going forward,
// entering going back) of N·C values, 4L + 2 of each per microbatch; the loss's three statistics
// stay all-reduces, and once per step (on each pipeline rank) one all-reduce completes the
// gradients of the parameters every rank holds whole — under ZeRO only where this rank's shard
// holds some, so its count is checked without ZeRO and its size without ZeRO and pipelining.
void check_sequence_parallel_bytes(const RunRecord& run, const ParityCase& c, const config::ParallelLayout& layout,
                                   dist::Communicator* pipeline, int64_t replicated, const std::string& what,
                                   RankChecks& t) {
  const int64_t N = int64_t{c.global_batch} / layout.dp / c.micros * c.seq_len;
  const int64_t L = c.model.n_layer, C = c.model.n_embd;
  const std::vector<size_t> parts(static_cast<size_t>(layout.tp), static_cast<size_t>(N * C / layout.tp));
  const auto per_step = [&](uint64_t per_micro) { return static_cast<double>(c.micros * (4 * L + 2) * per_micro); };
  const bool exact_all_reduce = layout.pp == 1 && c.zero_stage == 0;
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const dist::CommStats& comm = run.steps[s].tensor_comm;
    const dist::OpCounter& gathers = comm.of(dist::OpKind::AllGather);
    const dist::OpCounter& scatters = comm.of(dist::OpKind::ReduceScatter);
    const dist::OpCounter& reduces = comm.of(dist::OpKind::AllReduce);
    const std::vector<double> mine{static_cast<double>(gathers.ops), static_cast<double>(gathers.bytes_sent),
                                   static_cast<double>(scatters.ops), static_cast<double>(scatters.bytes_sent),
                                   static_cast<double>(reduces.ops), static_cast<double>(reduces.bytes_sent)};
    const std::vector<double> total = parallel::sum_over_ranks(pipeline, mine);
    // Besides, once per step on each pipeline rank, the gradient norm sums its split parameters'
    // squares over the group (one double, parallel/rank_sum.h): once for each class of squares
    // split over tp — over tp alone, and with ZeRO over tp and dp, with pipelining over tp and pp.
    const double norm_ops = layout.pp * (c.zero_stage >= 1 ? 2 : 1) * (layout.pp > 1 ? 2 : 1);
    const double norm_bytes = norm_ops * static_cast<double>(parallel::sum_over_ranks_bytes(1, layout.tp));
    const std::vector<double> want{
        per_step(1) + norm_ops, per_step(dist::all_gather_bytes(parts, 4, 0)) + norm_bytes, per_step(1),
        per_step(dist::reduce_scatter_bytes(parts, 4, 0)), static_cast<double>(3 * c.micros + layout.pp),
        static_cast<double>(3 * c.micros * dist::all_reduce_bytes(static_cast<size_t>(N), 4, layout.tp) +
                            dist::all_reduce_bytes(static_cast<size_t>(replicated), 4, layout.tp))};
    const size_t checked = exact_all_reduce ? want.size() : layout.pp > 1 && c.zero_stage == 0 ? 5 : 4;
    t.expect(std::equal(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(checked), total.begin()),
             fmt::format("{}: step {} on the tensor-parallel group (all-gathers, bytes, reduce-scatters, bytes, "
                         "all-reduces, bytes): {}, the formula {}", what, s + 1, fmt::join(total, " "),
                         fmt::join(want, " ")));
  }
}

// Elements of the parameters a tensor-parallel plan leaves whole.
int64_t replicated_elements(const config::ModelConfig& model, int tp) {
  MemoryAccountant memory;
  const parallel::TensorParallelPlan plan(model, tp, 0);
  nn::GPT local(model, memory, 11, &plan);
  int64_t n = 0;
  for (const nn::Parameter& p : local.parameters().all()) {
    if (p.spec.replicated_over(config::MeshDim::TP)) n += p.numel();
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    const int n = world.size();
    // Vocabularies: 61 is divided by neither 2 nor 4 (padded), 64 by both.
    const std::vector<config::ModelConfig> models{gpt2_tied(61), gpt2_tied(64), llama_untied(53), llama_untied(64),
                                                  llama_gqa(53)};
    auto run_case = [&](const config::ModelConfig& model, const config::ParallelLayout& layout, int zero_stage,
                        int micros, config::RecomputePolicy recompute = config::RecomputePolicy::None,
                        int sequences_per_micro = 2, int steps = 5) {
      dist::Mesh mesh(world, layout);
      ParityCase c;
      c.model = model;
      c.zero_stage = zero_stage;
      c.micros = micros;
      c.recompute.policy = recompute;
      c.sequence_parallel = layout.sp;
      c.global_batch = sequences_per_micro * layout.dp * micros;
      c.steps = steps;
      c.schedule = layout.schedule;
      c.virtual_stages = layout.virtual_stages;
      const RunRecord reference = run_reference(c);
      const RunRecord run = run_parallel(c, &mesh);
      const std::string what =
          describe(c, layout) + " recompute " + std::string(config::recompute_policy_name(recompute));
      check_matches_reference(run, reference, what, t);
      check_activation_prediction(run, what, t);
      // Recomputed forwards repeat their all-reduces; the formula is for a step without.
      if (recompute == config::RecomputePolicy::None) {
        dist::Communicator* pipeline = layout.pp > 1 ? &mesh.pp() : nullptr;
        if (layout.sp) {
          check_sequence_parallel_bytes(run, c, layout, pipeline, replicated_elements(model, layout.tp), what, t);
        } else {
          check_tensor_parallel_bytes(run, c, layout, pipeline, what, t);
        }
      }
      if (t.rank == 0) fmt::print("{}: checked\n", what);
    };
    // Adafactor's row and column sums and its update RMS are whole-matrix statistics: each block's
    // terms go to the matrix's global rows and columns (a padded vocabulary's padding rows add none),
    // summed over the group. Llama models only: GPT-2's attention key bias has a zero gradient up to
    // rounding, which Adafactor's unfactored second moment turns into a unit update (as in
    // optimizer_parity_test).
    auto run_adafactor = [&](const config::ModelConfig& model, const config::ParallelLayout& layout, int zero_stage,
                             bool first_moment) {
      dist::Mesh mesh(world, layout);
      ParityCase c;
      c.model = model;
      c.zero_stage = zero_stage;
      c.micros = 2;
      c.optimizer.kind = optim::OptimizerKind::Adafactor;
      c.optimizer.first_moment = first_moment;
      c.optimizer.relative_step = first_moment;
      c.lr = 1e-2f;
      c.global_batch = 2 * layout.dp * c.micros;
      const RunRecord reference = run_reference(c);
      const RunRecord run = run_parallel(c, &mesh);
      const std::string what = fmt::format("adafactor{} {}", first_moment ? " (first moment, relative step)" : "",
                                           describe(c, layout));
      check_matches_reference(run, reference, what, t);
      if (t.rank == 0) fmt::print("{}: checked\n", what);
    };
    // tp over the whole world.
    if (n <= 4) {
      config::ParallelLayout tp_only;
      tp_only.tp = n;
      for (const config::ModelConfig& model : {models[2], models[4]}) {
        for (bool first_moment : {false, true}) run_adafactor(model, tp_only, 0, first_moment);
      }
    }
    if (n == 4) {
      // ZeRO's shards cut the blocks' elements too.
      config::ParallelLayout tp_dp;
      tp_dp.tp = 2;
      tp_dp.dp = 2;
      for (int zero_stage : {1, 3}) run_adafactor(models[2], tp_dp, zero_stage, true);
    }
    if (n <= 4) {
      config::ParallelLayout layout;
      layout.tp = n;
      dist::Mesh mesh(world, layout);
      for (const config::ModelConfig& model : models) {
        check_initial_weights(model, mesh.tp(), t);
        check_blocks(model, mesh.tp(), t);
      }
      for (const config::ModelConfig& model : models) {
        for (int micros : {1, 3}) run_case(model, layout, 0, micros);
      }
      // Recomputation: the activation prediction holds the split widths (selective drops the
      // MLP activation's F/tp and the whole norm outputs).
      for (const config::ModelConfig& model : {models[0], models[2]}) {
        for (config::RecomputePolicy policy : {config::RecomputePolicy::Full, config::RecomputePolicy::Selective}) {
          run_case(model, layout, 0, 2, policy);
        }
      }
      // The activation is elementwise on the column-parallel output: every kind splits as the
      // architecture's own does, selective recomputation rebuilding it from each rank's part.
      const std::pair<config::ModelConfig, config::Activation> activations[] = {
          {models[0], config::Activation::Relu},
          {models[0], config::Activation::Relu2},
          {models[0], config::Activation::Swiglu},
          {models[2], config::Activation::Relu2}};
      for (auto [model, activation] : activations) {
        model.activation = activation;
        check_initial_weights(model, mesh.tp(), t);
        check_blocks(model, mesh.tp(), t);
        for (config::RecomputePolicy policy : {config::RecomputePolicy::None, config::RecomputePolicy::Selective}) {
          run_case(model, layout, 0, 2, policy);
        }
      }
      // Sequence parallelism: several sequences per microbatch (packed collectives) and one.
      layout.sp = true;
      for (const config::ModelConfig& model : models) {
        for (int micros : {1, 3}) run_case(model, layout, 0, micros);
      }
      for (const config::ModelConfig& model : {models[0], models[2]}) {
        run_case(model, layout, 0, 2, config::RecomputePolicy::None, 1);
        for (config::RecomputePolicy policy : {config::RecomputePolicy::Full, config::RecomputePolicy::Selective}) {
          run_case(model, layout, 0, 2, policy);
        }
      }
    }
    if (n == 4) {
      config::ParallelLayout layout;
      layout.tp = 2;
      layout.dp = 2;
      for (int zero_stage : {0, 1, 2, 3}) {
        for (const config::ModelConfig& model : {models[0], models[2], models[4]}) run_case(model, layout, zero_stage, 2);
      }
      // A vocabulary large enough that one rank's ZeRO shard holds only split parameters (the
      // embedding's block) and its peer's only whole ones: the gradient norm's reductions must
      // still be the same collectives on both.
      run_case(gpt2_tied(2048), layout, 1, 2);
      layout.sp = true;
      for (int zero_stage : {0, 1, 2, 3}) {
        for (const config::ModelConfig& model : {models[0], models[2], models[4]}) run_case(model, layout, zero_stage, 2);
      }
      layout.dp = 1;
      layout.pp = 2;
      for (bool sp : {false, true}) {
        layout.sp = sp;
        for (const config::ModelConfig& model : {models[0], models[2]}) run_case(model, layout, 0, 3);
      }
    }
    if (n == 8) {
      // PTD-P on one mesh of 8 (Megatron's order: tp fastest, then dp, then pp), 6 steps, GPT-2
      // tied (its embedding shared by the first and last stages) and Llama untied: tp 2 · pp 2 · dp 2
      // with 1F1B and ZeRO-1, and tp 2 + sp · pp 2 interleaved (v = 2) · dp 2.
      config::ModelConfig gpt2 = gpt2_tied(61), llama = llama_untied(53);
      gpt2.n_layer = llama.n_layer = 4;
      config::ParallelLayout layout;
      layout.tp = 2;
      layout.pp = 2;
      layout.dp = 2;
      for (const config::ModelConfig& model : {gpt2, llama}) {
        run_case(model, layout, 1, 3, config::RecomputePolicy::None, 2, 6);
      }
      layout.sp = true;
      layout.schedule = pipeline::ScheduleKind::Interleaved;
      layout.virtual_stages = 2;
      for (const config::ModelConfig& model : {gpt2, llama}) {
        run_case(model, layout, 1, 4, config::RecomputePolicy::None, 2, 6);
      }
    }
  });
}
