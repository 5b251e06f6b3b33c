// Mixture of experts under mpirun (2, 4 and 8 ranks) against the one-process run of the same
// microbatches (the capacity is counted per microbatch, so the reference runs the parallel run's
// microbatches one after another, with gradient accumulation):
//  - parity: losses and gradient norms within 1e-5 relative every step, parameters within 1e-4
//    after 5 steps, for GPT-2 with top-1 and Llama with top-2 routing, a capacity tight enough
//    that tokens drop, dropout on; expert parallelism ep = dp and ep = dp / 2 (dp = 2·ep), ZeRO
//    1, 2 and 3 (the experts sharded over edp), recomputation, tp 2 beside ep, and plain data parallelism with
//    replicated experts; pp 2 under 1F1B and under ZB-H1, whose weight halves form the experts' and the
//    router's gradients after the input halves' exchanges (pp 2 alone on 2 ranks, beside dp 2 = ep 2 on 4);
//    Adafactor, which factors each expert of a stack on its own, at dp 2 = ep 2 and at dp 4 × ep 2
//    with ZeRO-1; sequence parallelism (tp 2 with sp alone, and beside ep 2), the layer routing the
//    gathered sequence on every tp rank;
//  - the routing is the reference's: the same choices dropped, the same load on every expert;
//  - bytes on the expert-parallel group equal the formula (without recomputation, which repeats
//    the forward's exchanges, and without ZeRO): four all-to-all passes (dispatch and combine,
//    forward and backward) of the rows sent to other ranks, C floats each, the routing counts,
//    (ep - 1)·E/ep integers per rank and layer-microbatch, and the gradient norm's sum of the experts'
//    squares over ep (gathered in rank order: ep - 1 doubles sent per rank);
//  - memory: every rank's activation peak is the program walk's prediction;
//  - gradient compression and 1-bit Adam at dp 4 × ep 2, the experts' gradients (momentum) compressed
//    over their own group.
#include <fmt/format.h>

#include "dist/mesh.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

struct Layout {
  int dp, ep, tp, zero;
  exec::RecomputeOptions recompute;
  int pp = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;
  std::string optimizer = "adamw";
  bool sp = false;  // sequence parallelism beside tp
};

ParityCase moe_case(const std::string& name, const config::ModelConfig& model, int dp, int zero) {
  ParityCase c;
  c.name = name;
  c.model = model;
  c.seq_len = model.seq_len;
  c.global_batch = 4 * dp;
  c.micros = 2;
  c.zero_stage = zero;
  c.bucket_bytes = 2048;
  return c;
}

void check_routing(const RunRecord& run, const RunRecord& ref, const std::string& what, RankChecks& t) {
  for (size_t s = 0; s < run.steps.size() && s < ref.steps.size(); ++s) {
    const nn::MoeStatistics &a = run.steps[s].moe, &b = ref.steps[s].moe;
    t.expect(a.assignments == b.assignments && a.dropped == b.dropped,
             fmt::format("{} step {}: {} choices, {} dropped; the reference {}, {}", what, s, a.assignments, a.dropped,
                         b.assignments, b.dropped));
    t.expect_eq(a.load, b.load, fmt::format("{} step {}: load per expert", what, s));
    t.expect(std::abs(a.aux_loss_sum - b.aux_loss_sum) <= 1e-4 * std::abs(b.aux_loss_sum),
             fmt::format("{} step {}: aux loss sum {} vs {}", what, s, a.aux_loss_sum, b.aux_loss_sum));
  }
  t.expect(!ref.steps.empty() && ref.steps[0].moe.dropped > 0, what + ": the capacity must drop tokens");
}

void check_all_to_all(const ParityCase& c, const Layout& l, const RunRecord& run, dist::Communicator& dp,
                      const std::string& what, RankChecks& t) {
  // Under pipelining the statistics are the whole pipeline's, the counters one stage's. Adafactor
  // sums its per-tensor statistics over ep as well.
  if (l.ep == 1 || l.zero != 0 || l.pp != 1 || l.recompute.policy != config::RecomputePolicy::None ||
      l.optimizer != "adamw") {
    return;
  }
  const int64_t E_local = c.model.moe_experts / l.ep;
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const nn::MoeStatistics& m = run.steps[s].moe;  // summed over dp
    const double measured = parallel::sum_over_ranks(
        &dp, std::vector<double>{static_cast<double>(run.steps[s].expert_comm.bytes_sent)})[0];
    const double expected = 4.0 * static_cast<double>(m.remote_rows) * c.model.n_embd * 4 +
                            static_cast<double>(m.routings) * (l.ep - 1) * E_local * 4 +
                            static_cast<double>(l.dp) * (l.ep - 1) * 8;
    t.expect(measured == expected && m.remote_rows > 0,
             fmt::format("{} step {}: {} bytes on the ep groups, the formula {} ({} remote rows)", what, s, measured,
                         expected, m.remote_rows));
  }
}

// Gradient compression under expert parallelism, dp 4 × ep 2: the dense gradients are compressed
// over dp, the experts' over their own group (edp, 2 ranks). Top-k at ratio 1 sends everything and
// equals the one-process run; each compressor's warm-up steps are exact, its run stays within the
// 0.5 % of the uncompressed run's loss that parallel_compression's training check allows, and the
// experts' group sends less than the uncompressed run's (their buckets were compressed).
void check_compression(dist::Communicator& world, RankChecks& t) {
  const config::ModelConfig model = gpt2_moe_config();
  ParityCase c = moe_case("gpt2", model, 4, 0);
  c.steps = 8;
  config::ParallelLayout layout;
  layout.dp = 4;
  layout.ep = 2;
  layout.global_batch = c.global_batch;
  dist::Mesh mesh(world, layout);
  struct Measured {
    RunRecord run;
    double expert_bytes = 0;  // sent on the experts' group over the run, summed over the ranks
  };
  auto measure = [&](const ParityCase& k) {
    const uint64_t before = mesh.edp().stats().bytes_sent;
    Measured m;
    m.run = run_parallel(k, &mesh);
    m.expert_bytes = parallel::sum_over_ranks(
        &world, std::vector<double>{static_cast<double>(mesh.edp().stats().bytes_sent - before)})[0];
    return m;
  };
  ParityCase one = c;
  one.micros = c.micros * layout.dp;
  const RunRecord ref = run_parallel(one, nullptr);
  const Measured exact = measure(c);
  ParityCase all = c;
  all.compression.method = parallel::CompressionMethod::TopK;
  all.compression.ratio = 1.0;
  check_matches_reference(measure(all).run, ref, "gpt2 dp 4 ep 2 topk ratio 1", t);
  for (parallel::CompressionMethod method :
       {parallel::CompressionMethod::TopK, parallel::CompressionMethod::Qsgd, parallel::CompressionMethod::OneBit,
        parallel::CompressionMethod::PowerSgd}) {
    ParityCase k = c;
    k.compression.method = method;
    k.compression.ratio = 0.1;
    k.compression.rank = 2;
    k.compression.warmup_steps = 2;
    const Measured m = measure(k);
    const std::string what = fmt::format("gpt2 dp 4 ep 2 {}", parallel::compression_name(method));
    for (size_t s = 0; s < 2; ++s) {
      t.expect(std::abs(m.run.steps[s].loss - exact.run.steps[s].loss) <= 1e-5 * exact.run.steps[s].loss,
               fmt::format("{}: warm-up step {} is not exact ({} vs {})", what, s + 1, m.run.steps[s].loss,
                           exact.run.steps[s].loss));
    }
    const double last = m.run.steps.back().loss, exact_last = exact.run.steps.back().loss;
    t.expect(std::abs(last - exact_last) <= 5e-3 * exact_last,
             fmt::format("{}: final loss {} vs the uncompressed run's {}", what, last, exact_last));
    t.expect(m.expert_bytes < 0.75 * exact.expert_bytes,
             fmt::format("{}: the experts' group sent {} bytes, the uncompressed run {}: their gradients were not "
                         "compressed", what, m.expert_bytes, exact.expert_bytes));
    if (t.rank == 0) {
      fmt::print("{}: loss {:.5f} (uncompressed {:.5f}), experts' group {:.0f} bytes (uncompressed {:.0f})\n", what,
                 last, exact_last, m.expert_bytes, exact.expert_bytes);
    }
  }
  // 1-bit Adam: AdamW until its freeze step, then each expert's momentum averaged in one bit per
  // element over the experts' group, the dense momentum over dp.
  ParityCase onebit = c;
  onebit.optimizer.kind = optim::OptimizerKind::OneBitAdam;
  onebit.optimizer.freeze_step = 2;
  const Measured m = measure(onebit);
  for (size_t s = 0; s < 3; ++s) {  // the third step's loss is the second's update's
    t.expect(m.run.steps[s].loss == exact.run.steps[s].loss,
             fmt::format("gpt2 dp 4 ep 2 onebit_adam: warm-up step {} is not AdamW's ({} vs {})", s + 1,
                         m.run.steps[s].loss, exact.run.steps[s].loss));
  }
  const double last = m.run.steps.back().loss, exact_last = exact.run.steps.back().loss;
  t.expect(std::abs(last - exact_last) <= 5e-3 * exact_last,
           fmt::format("gpt2 dp 4 ep 2 onebit_adam: final loss {} vs AdamW's {}", last, exact_last));
  t.expect(m.expert_bytes < 0.75 * exact.expert_bytes,
           fmt::format("gpt2 dp 4 ep 2 onebit_adam: the experts' group sent {} bytes, AdamW's run {}: their momentum "
                       "was not exchanged compressed", m.expert_bytes, exact.expert_bytes));
  if (t.rank == 0) {
    fmt::print("gpt2 dp 4 ep 2 onebit_adam: loss {:.5f} (AdamW {:.5f}), experts' group {:.0f} bytes (AdamW {:.0f})\n",
               last, exact_last, m.expert_bytes, exact.expert_bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    const int ranks = world.size();
    exec::RecomputeOptions full;
    full.policy = config::RecomputePolicy::Full;
    exec::RecomputeOptions selective;
    selective.policy = config::RecomputePolicy::Selective;
    std::vector<Layout> layouts;
    if (ranks <= 4) layouts = {{ranks, ranks, 1, 0, {}}, {ranks, 1, 1, 0, {}}, {ranks, ranks, 1, 1, full}};
    // ZeRO-3: the dense parameters sharded and gathered over dp, the experts' over edp (of one rank here).
    if (ranks == 2) layouts.push_back({2, 2, 1, 3, {}});
    // pp 2 under ZB-H1, a block per stage: each MoE block's weight half runs apart from its input half.
    if (ranks == 2) layouts.push_back({1, 1, 1, 0, {}, 2, pipeline::ScheduleKind::ZeroBubbleH1});
    // Adafactor: each expert of a stack is a matrix of its own, whole on the rank that holds it.
    if (ranks == 2) layouts.push_back({2, 2, 1, 0, {}, 1, pipeline::ScheduleKind::OneFOneB, "adafactor"});
    // Sequence parallelism: the layer gathers the sequence and routes all of it on every tp rank.
    if (ranks == 2) layouts.push_back({1, 1, 2, 0, {}, 1, pipeline::ScheduleKind::OneFOneB, "adamw", true});
    if (ranks == 8) {
      // ep 4 (a single expert per rank) with dp = 2·ep: alone, and with ZeRO-1 over dp and edp and
      // full recomputation.
      layouts.push_back({8, 4, 1, 0, {}});
      layouts.push_back({8, 4, 1, 1, full});
    }
    if (ranks == 4) {
      layouts.push_back({4, 2, 1, 0, {}});         // dp = 2·ep
      layouts.push_back({4, 2, 1, 2, selective});  // ZeRO-2 over dp and over edp
      layouts.push_back({4, 2, 1, 3, full});       // ZeRO-3: gathered over dp and over edp, recomputed
      layouts.push_back({2, 2, 2, 1, {}});         // tp 2 beside ep 2
      layouts.push_back({2, 2, 1, 1, {}, 2});      // pp 2 (1F1B) × dp 2 = ep 2, a block per stage
      layouts.push_back({2, 2, 1, 1, {}, 2, pipeline::ScheduleKind::ZeroBubbleH1});  // the same under ZB-H1
      // Adafactor over ep 2 with the experts' ZeRO-1 shards over edp.
      layouts.push_back({4, 2, 1, 1, {}, 1, pipeline::ScheduleKind::OneFOneB, "adafactor"});
      layouts.push_back({2, 2, 2, 1, {}, 1, pipeline::ScheduleKind::OneFOneB, "adamw", true});  // tp 2 with sp beside ep 2
    }
    for (const config::ModelConfig& model : {gpt2_moe_config(), llama_moe_config()}) {
      for (const Layout& l : layouts) {
        // GPT-2's attention key bias has a zero gradient up to rounding, which Adafactor's unfactored
        // second moment turns into a whole step (optimizer_parity_test's check_engine): Adafactor's
        // parity runs on the Llama model, as there.
        if (l.optimizer == "adafactor" && model.arch != config::Architecture::Llama) continue;
        ParityCase c = moe_case(config::architecture_name(model.arch), model, l.dp, l.zero);
        c.recompute = l.recompute;
        c.schedule = l.schedule;
        c.optimizer.kind = optim::parse_optimizer_kind(l.optimizer);
        c.sequence_parallel = l.sp;
        if (l.optimizer == "adafactor") c.lr = 1e-2f;
        // The reference: one process, the same microbatches in turn.
        ParityCase one = c;
        one.zero_stage = 0;
        one.recompute = {};
        one.sequence_parallel = false;
        one.micros = c.micros * l.dp;
        const RunRecord ref = run_parallel(one, nullptr);
        config::ParallelLayout layout;
        layout.dp = l.dp;
        layout.ep = l.ep;
        layout.tp = l.tp;
        layout.pp = l.pp;
        layout.global_batch = c.global_batch;
        dist::Mesh mesh(world, layout);
        const RunRecord run = run_parallel(c, &mesh);
        const std::string what = fmt::format("{} top-{} dp {} ep {} tp {}{} pp {} ({}) zero {} recompute {} {}", c.name,
                                             model.moe_top_k, l.dp, l.ep, l.tp, l.sp ? " sp" : "", l.pp,
                                             config::schedule_name(l.schedule), l.zero,
                                             config::recompute_policy_name(l.recompute.policy), l.optimizer);
        check_matches_reference(run, ref, what, t);
        check_routing(run, ref, what, t);
        check_all_to_all(c, l, run, mesh.dp(), what, t);
        check_activation_prediction(run, what, t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
    if (ranks == 4) check_compression(world, t);
  });
}
