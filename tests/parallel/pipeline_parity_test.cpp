// Pipeline parallelism under mpirun (2 and 4 ranks): every synchronous schedule (GPipe, 1F1B,
// interleaved with v = 2, ZB-H1) at m = 1, p and 2p + 1 microbatches where the schedule allows
// them (interleaved: multiples of p), GPT-2 with a tied embedding (the first and last stages share
// it) and Llama untied, blocks that divide the stages and blocks that do not, with dropout and
// gradient clipping; 1F1B and ZB-H1 with full, selective and every-k recomputation in each stage;
// and with 4 ranks, dp 2 × pp 2 without ZeRO and with ZeRO-1 and 2. Each run matches the single-process reference:
// losses and gradient norms within 1e-5 relative, parameters within 1e-4 after 5 steps; and the
// timeline of its last step, gathered from every rank, is one of its schedule on one clock.
// A plain main: every failed check prints its rank; the ranks agree on the count of failures.
// With `--stall R` pipeline rank R sleeps before its first step instead, and the job must end
// through the watchdog, which names the waiting rank's instruction (tests/parallel/CMakeLists.txt).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "../common/rank_checks.h"
#include "dist/mesh.h"
#include "dist/mpi_runtime.h"
#include "schedule/generators.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

using Checks = tessera::testing::RankChecks;

std::string describe(const ParityCase& c, int dp, int pp) {
  return fmt::format("{} L{} dp{} pp{} {} v{} m{}", config::architecture_name(c.model.arch), c.model.n_layer, dp, pp,
                     config::schedule_name(c.schedule), c.virtual_stages, c.micros);
}

// The timeline of the last step, gathered from every pipeline rank: each rank's records follow its
// list, never overlap, and no receive ends before its send began (on the common clock, within
// the clock alignment's stated uncertainty): the clocks were aligned and nothing was left out.
void check_timeline(const RunRecord& run, const ParityCase& c, int p, const std::string& what, Checks& t) {
  const pipeline::MeasuredTimeline& tl = run.timeline;
  config::ParallelLayout layout;
  layout.pp = p;
  layout.virtual_stages = c.virtual_stages;
  layout.schedule = c.schedule;
  layout.global_batch = c.micros;
  std::string follows;
  try {
    pipeline::check_follows(tl, pipeline::make_schedule(layout));
  } catch (const Error& e) {
    follows = e.what();
  }
  t.expect(follows.empty(), fmt::format("{}: the timeline does not follow the schedule: {}", what, follows));
  if (!follows.empty()) return;
  const double slack = 1e-6;  // rounding of the shifted times
  int overlaps = 0, early = 0;
  std::string first_problem;
  for (size_t r = 0; r < tl.records.size(); ++r) {
    std::vector<std::pair<double, double>> spans;
    for (const pipeline::MeasuredInstruction& m : tl.records[r]) spans.emplace_back(m.start, m.end);
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) overlaps += spans[i].first < spans[i - 1].second - slack;
    for (const pipeline::MeasuredInstruction& m : tl.records[r]) {
      if (m.op != pipeline::Op::Recv) continue;
      for (const pipeline::MeasuredInstruction& s : tl.records[static_cast<size_t>(m.peer)]) {
        if (s.op != pipeline::Op::Send || s.microbatch != m.microbatch || s.tensor != m.tensor) continue;
        if (pipeline::transfer_edge(pipeline::instruction_of(s)) != pipeline::transfer_edge(pipeline::instruction_of(m)))
          continue;
        const double uncertainty = tl.clock_uncertainty[r] + tl.clock_uncertainty[static_cast<size_t>(m.peer)];
        if (m.end < s.start - uncertainty - slack) {
          ++early;
          if (first_problem.empty())
            first_problem = fmt::format("'{}' on rank {} ended at {} s, before its send began at {} s (clocks within "
                                        "{} s)", pipeline::describe(pipeline::instruction_of(m)), r, m.end, s.start,
                                        uncertainty);
        }
      }
    }
  }
  t.expect(overlaps == 0, fmt::format("{}: {} records overlap another of their rank", what, overlaps));
  t.expect(early == 0, fmt::format("{}: {} receives ended before their sends began: {}", what, early, first_problem));
}

// Each receive is waited for right before the unit action that reads its tensor, after every
// unit action listed before that one, wherever the list places the receive (the simulator's
// isend/irecv timing): under Megatron's interleaved lists a receive listed ahead of an unrelated
// compute would otherwise stall it.
void check_receives_wait_for_their_reader(const RunRecord& run, const std::string& what, Checks& t) {
  const std::vector<exec::Action>& actions = run.program.actions;
  int checked = 0;
  for (size_t j = 0; j < actions.size(); ++j) {
    const exec::Action& r = actions[j];
    if (r.kind != exec::Action::Kind::Recv) continue;
    const bool activation = r.payload == pipeline::Tensor::Activation;
    size_t reader = j, before = j;
    for (size_t k = j + 1; k < actions.size(); ++k) {
      const exec::Action& a = actions[k];
      if (a.kind != exec::Action::Kind::Unit) continue;
      if (a.microbatch == r.microbatch && activation == exec::is_forward(a.phase) &&
          a.unit == (activation ? r.unit : r.unit - 1)) {
        reader = k;
        break;
      }
      before = k;
    }
    if (reader == j) {
      t.expect(false, fmt::format("{}: {} has no reader", what, exec::describe(r)));
      continue;
    }
    const auto& spans = run.spans;
    t.expect(spans[j].end <= spans[reader].start,
             fmt::format("{}: {} ended after its reader began", what, exec::describe(r)));
    if (before != j) {
      t.expect(spans[j].start >= spans[before].end,
               fmt::format("{}: {} was waited for before '{}', which does not read it", what, exec::describe(r),
                           exec::describe(actions[before])));
    }
    ++checked;
  }
  t.expect(checked > 0 && run.spans.size() == actions.size(), fmt::format("{}: no receive to check", what));
}

// Activation memory follows the schedule (sent tensors leave the activations at their Send, so
// the peaks do not depend on timing): under 1F1B a stage holds at most p microbatches whatever m,
// so m = p and m = 2p + 1 peak alike, within p times one microbatch's peak; under GPipe every
// microbatch is alive at once, so more microbatches peak higher.
void check_memory_follows_the_schedule(dist::Communicator& world, Checks& t) {
  const int p = world.size();
  auto peak = [&](config::ScheduleKind kind, int m) {
    ParityCase c;
    c.model = gpt2_odd_config();
    c.model.n_layer = p;
    c.schedule = kind;
    c.micros = m;
    c.global_batch = 2 * m;
    c.steps = 1;
    return static_cast<int64_t>(run_pipelined(c, world).steps[0].memory.peak_of(MemoryTag::Activations));
  };
  const int64_t one = peak(config::ScheduleKind::OneFOneB, 1);
  const int64_t at_p = peak(config::ScheduleKind::OneFOneB, p), beyond = peak(config::ScheduleKind::OneFOneB, 2 * p + 1);
  const int64_t gpipe_p = peak(config::ScheduleKind::GPipe, p), gpipe_beyond = peak(config::ScheduleKind::GPipe, 2 * p + 1);
  std::printf("stage %d: activation peak (bytes) 1F1B m=1 %lld, m=%d %lld, m=%d %lld; GPipe m=%d %lld, m=%d %lld\n",
              world.rank(), static_cast<long long>(one), p, static_cast<long long>(at_p), 2 * p + 1,
              static_cast<long long>(beyond), p, static_cast<long long>(gpipe_p), 2 * p + 1,
              static_cast<long long>(gpipe_beyond));
  t.expect(at_p == beyond, fmt::format("stage {}: 1F1B's activation peak is {} bytes at m = {} but {} at m = {}",
                                       world.rank(), at_p, p, beyond, 2 * p + 1));
  t.expect(beyond <= p * one, fmt::format("stage {}: 1F1B's activation peak {} exceeds {} microbatches of {}",
                                          world.rank(), beyond, p, one));
  t.expect(gpipe_beyond > gpipe_p && gpipe_beyond > beyond,
           fmt::format("stage {}: GPipe's activation peak {} at m = {} is not above its {} at m = {} and 1F1B's {}",
                       world.rank(), gpipe_beyond, 2 * p + 1, gpipe_p, p, beyond));
}

}  // namespace

// Pipeline rank `victim` never takes its step; the others wait for its transfers.
void stall(dist::Communicator& world, int victim) {
  ParityCase c;
  c.model = gpt2_odd_config();
  c.micros = world.size();
  c.global_batch = 2 * c.micros;
  config::ParallelLayout layout;
  layout.pp = world.size();
  const dist::Mesh mesh(world, layout);  // before the stall: the wait is for the pipeline's transfer
  if (world.rank() == victim) std::this_thread::sleep_for(std::chrono::seconds(120));
  run_parallel(c, &mesh);
}

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  Checks t;
  t.rank = mpi.world_rank();
  const int victim = argc >= 3 && std::strcmp(argv[1], "--stall") == 0 ? std::stoi(argv[2]) : -1;
  try {
    dist::CommOptions options;
    options.timeout_seconds = victim >= 0 ? 2 : 60;
    options.check_sequence = true;
    auto world = mpi.world(options);
    if (victim >= 0) {
      stall(*world, victim);
      return 1;  // the watchdog should have ended the job
    }
    const int p = world->size();
    const config::ScheduleKind schedules[] = {config::ScheduleKind::GPipe, config::ScheduleKind::OneFOneB,
                                              config::ScheduleKind::Interleaved, config::ScheduleKind::ZeroBubbleH1};
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
      for (config::ScheduleKind kind : schedules) {
        const bool interleaved = kind == config::ScheduleKind::Interleaved;
        const int v = interleaved ? 2 : 1;
        const std::vector<int> ms = interleaved ? std::vector<int>{p, 2 * p} : std::vector<int>{1, p, 2 * p + 1};
        // Blocks that divide the stages, and (without interleaving) one more, which does not.
        const std::vector<int> layers = interleaved ? std::vector<int>{p * v} : std::vector<int>{p, p + 1};
        for (int L : layers) {
          for (int m : ms) {
            ParityCase c;
            c.model = model;
            c.model.n_layer = L;
            c.model.dropout = 0.1f;
            c.schedule = kind;
            c.virtual_stages = v;
            c.micros = m;
            c.global_batch = 2 * m;
            c.steps = 5;
            c.record_timeline = true;
            const RunRecord reference = run_reference(c);
            const RunRecord run = run_pipelined(c, *world);
            check_matches_reference(run, reference, describe(c, 1, p), t);
            check_activation_prediction(run, describe(c, 1, p), t);
            check_timeline(run, c, p, describe(c, 1, p), t);
            if (p > 1) check_receives_wait_for_their_reader(run, describe(c, 1, p), t);
            if (t.rank == 0) fmt::print("{}: checked\n", describe(c, 1, p));
          }
        }
      }
    }
    // Recomputation inside each stage: the stage's chain recomputes, the transfers do not change.
    for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
      for (config::ScheduleKind kind : {config::ScheduleKind::OneFOneB, config::ScheduleKind::ZeroBubbleH1}) {
        for (config::RecomputePolicy policy :
             {config::RecomputePolicy::Full, config::RecomputePolicy::Selective, config::RecomputePolicy::EveryK}) {
          ParityCase c;
          c.model = model;
          c.model.n_layer = 2 * p;
          c.model.dropout = 0.1f;
          c.schedule = kind;
          c.micros = p;
          c.global_batch = 2 * p;
          c.recompute.policy = policy;
          c.recompute.every_k = 1;
          const RunRecord reference = run_reference(c);
          const RunRecord run = run_pipelined(c, *world);
          const std::string what = describe(c, 1, p) + " recompute " + std::string(config::recompute_policy_name(policy));
          check_matches_reference(run, reference, what, t);
          check_activation_prediction(run, what, t);
          if (t.rank == 0) fmt::print("{}: checked\n", what);
        }
      }
    }
    check_memory_follows_the_schedule(*world, t);
    if (p == 4) {
      // dp 2 × pp 2: each pipeline's gradients reduced over its stage's data-parallel group, which
      // under ZeRO-1/2 also shards the stage's optimizer state (and gradients); the tied embedding's
      // two holders split it alike and sum their parts.
      config::ParallelLayout layout;
      layout.dp = 2;
      layout.pp = 2;
      dist::Mesh mesh(*world, layout);
      for (int zero_stage : {0, 1, 2}) {
        for (const config::ModelConfig& model : {gpt2_odd_config(), llama_config()}) {
          for (config::ScheduleKind kind : {config::ScheduleKind::OneFOneB, config::ScheduleKind::ZeroBubbleH1,
                                            config::ScheduleKind::Interleaved}) {
            ParityCase c;
            c.model = model;
            c.model.n_layer = kind == config::ScheduleKind::Interleaved ? 4 : 3;
            c.model.dropout = 0.1f;
            c.zero_stage = zero_stage;
            c.schedule = kind;
            c.virtual_stages = kind == config::ScheduleKind::Interleaved ? 2 : 1;
            c.micros = kind == config::ScheduleKind::Interleaved ? 2 : 3;
            c.global_batch = 4 * c.micros;
            const RunRecord reference = run_reference(c);
            const RunRecord run = run_parallel(c, &mesh);
            const std::string what = describe(c, 2, 2) + fmt::format(" ZeRO-{}", zero_stage);
            check_matches_reference(run, reference, what, t);
            check_activation_prediction(run, what, t);
            // The stage's group reduces its stages' parameters only, and ZeRO halves what each updates.
            t.expect(run.domain < run.numel, fmt::format("{}: the data-parallel group reduces {} elements, the whole "
                                                         "model ({})", what, run.domain, run.numel));
            const int64_t want_master = zero_stage == 0 ? run.domain : run.shard;
            t.expect(run.master == want_master &&
                         std::abs(2 * run.shard - run.domain) <= static_cast<int64_t>(run.domain_pieces),
                     fmt::format("{}: the optimizer updates {} elements (shard {}) of a domain of {} in {} pieces", what,
                                 run.master, run.shard, run.domain, run.domain_pieces));
            if (t.rank == 0) fmt::print("{}: checked\n", what);
          }
        }
      }
    }
    const int code = agree_on_failures(t, *world);
    world.reset();
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", t.rank, e.what());
    mpi.abort_job(1);
  }
}
