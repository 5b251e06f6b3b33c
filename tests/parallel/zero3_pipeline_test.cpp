// ZeRO-3 under a pipeline, dp 2 × pp 2 under mpirun (4 ranks): each stage's parameters sharded
// over the stage's data-parallel group, each unit gathered before its first action of a step and
// kept across the microbatches until after its last (parallel/parameter_gatherer.h).
//  - parity: GPipe, 1F1B, interleaved (v = 2) and ZB-H1, GPT-2 with its tied embedding (a piece
//    of its own on the first and last stages) and Llama untied, with dropout and gradient
//    clipping, match the one-process run (losses and norms within 1e-5, parameters within 1e-4);
//  - the gathers follow the program, not the microbatches: a step of 3 microbatches all-gathers
//    the same operations and bytes over the stage's group as a step of 1;
//  - memory: the params tag holds this rank's shard of its stage's parameters, and the comm tag
//    stays within the engine's bound (the stage's units gathered at once, and the buckets).
// A plain main: every failed check prints its rank; the ranks agree on the count of failures.
#include <fmt/format.h>

#include "dist/mesh.h"
#include "dist/ops.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

ParityCase zero3_case(const config::ModelConfig& model, config::ScheduleKind kind, int micros) {
  const bool interleaved = kind == config::ScheduleKind::Interleaved;
  ParityCase c;
  c.model = model;
  c.model.n_layer = interleaved ? 4 : 3;
  c.model.dropout = 0.1f;
  c.zero_stage = 3;
  c.schedule = kind;
  c.virtual_stages = interleaved ? 2 : 1;
  c.micros = micros;
  c.global_batch = 4 * micros;
  c.steps = 3;
  return c;
}

std::string describe(const ParityCase& c) {
  return fmt::format("{} L{} dp2 pp2 ZeRO-3 {} v{} m{}", config::architecture_name(c.model.arch), c.model.n_layer,
                     config::schedule_name(c.schedule), c.virtual_stages, c.micros);
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    TS_CHECK(world.size() == 4, "this test runs dp 2 × pp 2 on 4 ranks, not {}", world.size());
    config::ParallelLayout layout;
    layout.dp = 2;
    layout.pp = 2;
    dist::Mesh mesh(world, layout);
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
      for (config::ScheduleKind kind : {config::ScheduleKind::GPipe, config::ScheduleKind::OneFOneB,
                                        config::ScheduleKind::Interleaved, config::ScheduleKind::ZeroBubbleH1}) {
        const ParityCase c = zero3_case(model, kind, kind == config::ScheduleKind::Interleaved ? 2 : 3);
        const std::string what = describe(c);
        const RunRecord reference = run_reference(c);
        const RunRecord run = run_parallel(c, &mesh);
        check_matches_reference(run, reference, what, t);
        check_activation_prediction(run, what, t);
        t.expect(run.domain < run.numel && run.master == run.shard,
                 fmt::format("{}: the optimizer updates {} elements, the shard is {}, of a domain of {} (model {})",
                             what, run.master, run.shard, run.domain, run.numel));
        for (size_t s = 0; s < run.steps.size(); ++s) {
          const MemoryStats& m = run.steps[s].memory;
          t.expect(m.live_of(MemoryTag::Params) == sizeof(float) * static_cast<size_t>(run.shard),
                   fmt::format("{} step {}: {} bytes of parameters live, not the shard's {}", what, s,
                               m.live_of(MemoryTag::Params), sizeof(float) * run.shard));
          t.expect(m.peak_of(MemoryTag::Comm) <= run.comm_bound,
                   fmt::format("{} step {}: comm peak {} above the bound {}", what, s, m.peak_of(MemoryTag::Comm),
                               run.comm_bound));
        }
        if (kind == config::ScheduleKind::Interleaved) {
          if (t.rank == 0) fmt::print("{}: checked\n", what);
          continue;
        }
        // One microbatch: the same gathers. Per run of actions they would be about three times as many.
        const RunRecord one = run_parallel(zero3_case(model, kind, 1), &mesh);
        const dist::OpCounter& many = run.steps.back().comm.of(dist::OpKind::AllGather);
        const dist::OpCounter& single = one.steps.back().comm.of(dist::OpKind::AllGather);
        t.expect(many.ops == single.ops && many.bytes_sent == single.bytes_sent && many.ops > 0,
                 fmt::format("{}: a step all-gathers {} times ({} bytes) with 3 microbatches, {} times ({} bytes) "
                             "with 1", what, many.ops, many.bytes_sent, single.ops, single.bytes_sent));
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
  });
}
