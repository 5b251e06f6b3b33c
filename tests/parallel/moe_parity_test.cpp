// Mixture of experts under mpirun (2, 4 and 8 ranks) against the one-process run of the same
// microbatches (the capacity is counted per microbatch, so the reference runs the parallel run's
// microbatches one after another, with gradient accumulation):
//  - parity: losses and gradient norms within 1e-5 relative every step, parameters within 1e-4
//    after 5 steps, for GPT-2 with top-1 and Llama with top-2 routing, a capacity tight enough
//    that tokens drop, dropout on; expert parallelism ep = dp and ep = dp / 2 (dp = 2·ep), ZeRO
//    1, 2 and 3 (the experts sharded over edp), recomputation, tp 2 beside ep, and plain data parallelism with
//    replicated experts; pp 2 under 1F1B and under ZB-H1, whose weight halves form the experts' and the
//    router's gradients after the input halves' exchanges (pp 2 alone on 2 ranks, beside dp 2 = ep 2 on 4);
//  - the routing is the reference's: the same choices dropped, the same load on every expert;
//  - bytes on the expert-parallel group equal the formula (without recomputation, which repeats
//    the forward's exchanges, and without ZeRO): four all-to-all passes (dispatch and combine,
//    forward and backward) of the rows sent to other ranks, C floats each, the routing counts,
//    (ep - 1)·E/ep integers per rank and layer-microbatch, and the gradient norm's sum of the experts'
//    squares over ep (gathered in rank order: ep - 1 doubles sent per rank);
//  - memory: every rank's activation peak is the program walk's prediction.
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
  // Under pipelining the statistics are the whole pipeline's, the counters one stage's.
  if (l.ep == 1 || l.zero != 0 || l.pp != 1 || l.recompute.policy != memory::RecomputePolicy::None) return;
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

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    const int ranks = world.size();
    exec::RecomputeOptions full;
    full.policy = memory::RecomputePolicy::Full;
    exec::RecomputeOptions selective;
    selective.policy = memory::RecomputePolicy::Selective;
    std::vector<Layout> layouts;
    if (ranks <= 4) layouts = {{ranks, ranks, 1, 0, {}}, {ranks, 1, 1, 0, {}}, {ranks, ranks, 1, 1, full}};
    // ZeRO-3: the dense parameters sharded and gathered over dp, the experts' over edp (of one rank here).
    if (ranks == 2) layouts.push_back({2, 2, 1, 3, {}});
    // pp 2 under ZB-H1, a block per stage: each MoE block's weight half runs apart from its input half.
    if (ranks == 2) layouts.push_back({1, 1, 1, 0, {}, 2, pipeline::ScheduleKind::ZeroBubbleH1});
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
    }
    for (const config::ModelConfig& model : {gpt2_moe_config(), llama_moe_config()}) {
      for (const Layout& l : layouts) {
        ParityCase c = moe_case(config::architecture_name(model.arch), model, l.dp, l.zero);
        c.recompute = l.recompute;
        c.schedule = l.schedule;
        // The reference: one process, the same microbatches in turn.
        ParityCase one = c;
        one.zero_stage = 0;
        one.recompute = {};
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
        const std::string what = fmt::format("{} top-{} dp {} ep {} tp {} pp {} ({}) zero {} recompute {}", c.name,
                                             model.moe_top_k, l.dp, l.ep, l.tp, l.pp,
                                             config::schedule_name(l.schedule), l.zero,
                                             memory::recompute_policy_name(l.recompute.policy));
        check_matches_reference(run, ref, what, t);
        check_routing(run, ref, what, t);
        check_all_to_all(c, l, run, mesh.dp(), what, t);
        check_activation_prediction(run, what, t);
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
  });
}
