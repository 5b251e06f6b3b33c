// Data parallelism and ZeRO 0–3 under mpirun (2 and 4 ranks) against the single-process run on
// the same global batch, which every rank computes itself (same seed, same init):
//  - parity: losses within 1e-5 relative every step, parameters within 1e-4 after 5 steps, for a
//    GPT-2 model with tied embeddings and an odd parameter count (uneven shards), with and
//    without gradient accumulation, and an untied Llama model;
//  - replicas agree bitwise (stages 0-2 keep whole parameters on every rank);
//  - memory: per tag, params/grads/optimizer bytes equal the ZeRO formulas (zero_memory.h), and
//    transient 'comm' bytes stay within the engine's stated bound;
//  - communication: bytes sent per step equal the theoretical volume up to the uneven shards
//    (< 1 element per pass over the buffer) plus the stated small sums; none on accumulation
//    microbatches for stages 0 and 1; reductions posted during backward, bucket by bucket.
//
// A plain main: every failed check prints its rank and what failed; the ranks then agree on the
// count of failures and all exit non-zero when any rank saw one.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "dist/mpi_runtime.h"
#include "nn/gpt.h"
#include "parallel/rank_sum.h"
#include "parallel/zero_memory.h"
#include "parity_harness.h"
#include "../common/rank_checks.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

using Checks = tessera::testing::RankChecks;

uint64_t hash_floats(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Every rank's value of `h`.
std::vector<uint64_t> gather_u64(dist::Communicator& comm, uint64_t h) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  std::vector<size_t> counts(all.size(), sizeof(uint64_t));
  comm.all_gather(&h, all.data(), counts, DType::U8)->wait();
  return all;
}

void check_parity(const ParityCase& c, const RunRecord& ref, const RunRecord& run, Checks& t) {
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    const double want = ref.steps[s].loss, got = run.steps[s].loss;
    t.expect(std::abs(got - want) <= 1e-5 * std::abs(want),
             fmt::format("{}: step {} loss {:.9g} vs single-process {:.9g}", c.name, s + 1, got, want));
    const double wn = ref.steps[s].grad_norm, gn = run.steps[s].grad_norm;
    t.expect(std::abs(gn - wn) <= 1e-4 * wn, fmt::format("{}: step {} grad norm {:.9g} vs {:.9g}", c.name, s + 1, gn, wn));
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const double d = std::abs(static_cast<double>(run.params[i]) - ref.params[i]) /
                     std::max(1.0, std::abs(static_cast<double>(ref.params[i])));
    if (d > worst) worst = d, at = i;
  }
  t.expect(run.params.size() == ref.params.size() && worst <= 1e-4,
           fmt::format("{}: parameters differ from the single-process run by {:.3g} at element {}", c.name, worst, at));
  // The run must have moved the parameters, or parity would prove nothing.
  t.expect(ref.steps.front().grad_norm > c.grad_clip, fmt::format("{}: clipping never acted", c.name));
}

void check_memory(const ParityCase& c, const RunRecord& run, Checks& t) {
  const parallel::ZeroBytes want = parallel::zero_bytes(c.zero_stage, run.numel, run.shard);
  for (const StepRecord& s : run.steps) {
    const MemoryStats& m = s.memory;
    auto check = [&](MemoryTag tag, int64_t bytes) {
      // Live after the step, and the peak during it: a full buffer never reappears mid-step.
      t.expect(static_cast<int64_t>(m.live_of(tag)) == bytes && static_cast<int64_t>(m.peak_of(tag)) == bytes,
               fmt::format("{}: {} live {} / peak {} bytes, formula {}", c.name, memory_tag_name(tag), m.live_of(tag),
                           m.peak_of(tag), bytes));
    };
    check(MemoryTag::Params, want.params);
    check(MemoryTag::Grads, want.grads);
    check(MemoryTag::Optimizer, want.optimizer);
    t.expect(m.live_of(MemoryTag::Comm) == 0, fmt::format("{}: comm buffers left after the step", c.name));
    t.expect(m.peak_of(MemoryTag::Comm) <= run.comm_bound,
             fmt::format("{}: comm peak {} over the stated bound {}", c.name, m.peak_of(MemoryTag::Comm), run.comm_bound));
    t.expect((m.peak_of(MemoryTag::Comm) > 0) == (c.zero_stage >= 2),
             fmt::format("{}: comm peak {} (transient buffers only in stages 2 and 3)", c.name, m.peak_of(MemoryTag::Comm)));
  }
}

void check_comm(const ParityCase& c, const RunRecord& run, const std::vector<nn::Unit>& units, int rank, int ranks,
                Checks& t) {
  const int64_t numel = run.numel;
  // Uneven shards: each pass over the whole buffer (one reduce-scatter or all-gather of every
  // bucket or unit) differs from the even split by less than one element (4 bytes); an
  // all-reduce rounds down to whole bytes per bucket.
  const int passes = c.zero_stage == 0 ? static_cast<int>(run.buckets)
                     : c.zero_stage == 1 ? 2
                     : c.zero_stage == 2 ? c.micros + 1
                                         : 3 * c.micros;
  // Stated extras: the loss sum (1 double) and, when sharded, the squared-norm sum (1 double).
  double extra = static_cast<double>(parallel::sum_over_ranks_bytes(c.zero_stage >= 1 ? 2 : 1, ranks));
  if (c.zero_stage == 3) {
    // The formula gathers every parameter once in forward and once in backward per microbatch. The
    // program gathers once per run of consecutive actions on one unit (the head's forward and
    // backward share one; so do the embedding's backward and its next forward), and a unit's
    // gather covers every range it reads (a tied head: the token embedding too).
    const parallel::ShardLayout layout(numel, ranks);
    auto gather_bytes = [&](const nn::Unit& u) {
      double bytes = 0;
      for (const nn::ParamRange& r : u.params) {
        bytes += 4.0 * static_cast<double>(r.size() - layout.part(r, (rank + 1) % ranks).size());
      }
      return bytes;
    };
    double gathered = 0, formula = 0;
    for (size_t i = 0; i < run.program_units.size(); ++i) {
      if (i == 0 || run.program_units[i] != run.program_units[i - 1]) {
        gathered += gather_bytes(units[static_cast<size_t>(run.program_units[i])]);
      }
    }
    for (const nn::Unit& u : units) {
      for (const nn::ParamRange& r : {u.owned}) {
        formula += 2.0 * c.micros * 4.0 * static_cast<double>(r.size() - layout.part(r, (rank + 1) % ranks).size());
      }
    }
    extra += gathered - formula;
  }
  const double theory = parallel::zero_step_bytes(c.zero_stage, numel, ranks, c.micros);
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const double got = static_cast<double>(run.steps[s].comm.bytes_sent) - extra;
    t.expect(std::abs(got - theory) < 4.0 * passes,
             fmt::format("{}: step {} sent {} bytes (less {} stated extra), theory {} (±{} for uneven shards)", c.name,
                         s + 1, got, extra, theory, 4 * passes));
  }
  const StepRecord& s = run.steps.back();
  for (int m = 0; m < c.micros; ++m) {
    const bool communicates = c.zero_stage >= 2 || m + 1 == c.micros;
    t.expect((s.micro_bytes[static_cast<size_t>(m)] > 0) == communicates,
             fmt::format("{}: microbatch {} of {} sent {} bytes during forward/backward", c.name, m + 1, c.micros,
                         s.micro_bytes[static_cast<size_t>(m)]));
  }
}

// Reductions are posted from the hooks: right after unit u's backward, exactly the buckets that
// completion made complete are in flight (so they overlap the units still to run).
void check_posted_during_backward(const ParityCase& c, const RunRecord& run, const std::vector<parallel::Bucket>& buckets,
                                  Checks& t) {
  const std::vector<uint64_t>& after = run.steps.back().reductions_after_unit;
  for (size_t u = 0; u < after.size(); ++u) {
    uint64_t want = 0;
    for (const auto& b : buckets) want += b.complete_unit >= static_cast<int>(u);
    t.expect(after[u] == want,
             fmt::format("{}: after unit {}'s backward {} reductions were posted, want {}", c.name, u, after[u], want));
  }
}

std::vector<ParityCase> cases() {
  std::vector<ParityCase> out;
  for (int stage = 0; stage <= 3; ++stage) {
    for (int micros : {1, 2}) {
      ParityCase c;
      c.model = gpt2_odd_config();
      c.zero_stage = stage;
      c.micros = micros;
      c.bucket_bytes = micros == 1 ? 1024 : 64 << 10;  // one bucket per unit, or all in one
      c.name = fmt::format("gpt2 zero{} micro{} bucket{}", stage, micros, c.bucket_bytes);
      out.push_back(c);
    }
    ParityCase c;
    c.model = llama_config();
    c.zero_stage = stage;
    c.micros = 2;
    c.bucket_bytes = 12 << 10;  // several units per bucket
    c.name = fmt::format("llama zero{} micro2 bucket{}", stage, c.bucket_bytes);
    out.push_back(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, Checks& t) {
    const int ranks = world.size();
    t.expect(gpt2_odd_config().parameter_count() % ranks != 0 || ranks == 1,
             "the GPT-2 test model must not divide evenly over the ranks");
    std::map<std::string, RunRecord> references;
    for (const ParityCase& c : cases()) {
      const std::string key = c.model.arch == config::Architecture::Gpt2 ? "gpt2" : "llama";
      if (!references.count(key)) references[key] = run_reference(c);
      RunRecord run = run_data_parallel(c, &world);
      check_parity(c, references[key], run, t);
      const std::vector<uint64_t> hashes = gather_u64(world, hash_floats(run.params));
      for (int r = 1; r < ranks; ++r) {
        t.expect(hashes[static_cast<size_t>(r)] == hashes[0],
                 fmt::format("{}: rank {}'s parameters differ from rank 0's", c.name, r));
      }
      MemoryAccountant scratch;
      nn::GPT model(c.model, scratch, c.seed);
      check_memory(c, run, t);
      check_comm(c, run, model.units(), world.rank(), ranks, t);
      check_posted_during_backward(c, run, parallel::plan_buckets(model.units(), c.bucket_bytes / 4), t);
      if (t.rank == 0) fmt::print("{}: {} parameters, shard {}, {} buckets; checked\n", c.name, run.numel, run.shard, run.buckets);
    }
    // The ranks agree on the outcome.
  });
}
