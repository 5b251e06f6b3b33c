#include "plan/engine_memory.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <vector>

#include "config/workspace_bytes.h"
#include "core/check.h"
#include "optim/make_optimizer.h"
#include "plan/model_costs.h"
#include "plan/moe_model.h"
#include "plan/moe_model.h"

namespace tessera::plan {

using config::Architecture;
using config::ModelConfig;

namespace {

constexpr double kF32 = 4;
constexpr double kMiB = 1024.0 * 1024.0;
// Buckets whose reduction may be in flight before a new one waits for the oldest
// (parallel::GradientReducer::kMaxInFlight).
constexpr size_t kMaxBucketsInFlight = 2;

double d(int64_t v) { return static_cast<double>(v); }

DType compute_dtype(Precision p) { return p == Precision::Bf16 ? DType::BF16 : DType::F32; }

// The model's units on one tensor-parallel rank, as nn::GPT declares them: the flat parameter
// elements each owns (consecutive ranges, in unit order) and those it reads (the head also reads
// the tied token table, which the embedding owns).
struct Units {
  std::vector<double> owned;
  std::vector<double> reads;
  double table = 0;  // the token table: the first elements of the embedding's range
};

Units engine_units(const ModelConfig& m, const Layout& l) {
  Units u;
  const double C = m.n_embd;
  u.table = std::ceil(m.vocab_size / static_cast<double>(l.tp)) * C;  // padded to a multiple of tp
  const bool gpt2 = m.arch == Architecture::Gpt2;
  u.owned.push_back(u.table + (gpt2 ? d(m.seq_len) * C : 0.0));
  for (int layer = 0; layer < m.n_layer; ++layer) {
    u.owned.push_back(layer_params_per_rank(m, l.tp) + (m.is_moe_layer(layer) ? moe_extra_params_per_rank(m, l) : 0.0));
  }
  const double norm = (gpt2 ? 1 + (m.bias ? 1 : 0) : 1) * C;
  u.owned.push_back(norm + (m.tied_embeddings ? 0.0 : u.table));
  u.reads = u.owned;
  if (m.tied_embeddings) u.reads.back() += u.table;
  return u;
}

double total(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum;
}

// The units of `stage` under the planner's even split of the layers: [first, last).
std::pair<int, int> stage_units(const ModelConfig& m, const Layout& l, int stage) {
  const int per_stage = m.n_layer / l.pp;
  const int first = stage == 0 ? 0 : 1 + stage * per_stage;
  const int last = stage == l.pp - 1 ? m.n_layer + 2 : 1 + (stage + 1) * per_stage;
  return {first, last};
}

struct Bucket {
  double elements = 0;
  int first_unit = -1;    // the highest unit writing into it: its backward opens the bucket
  int complete_unit = 0;  // the lowest: after its backward the bucket is reduced
};

// parallel::plan_buckets over one piece: walking down from the last unit, each unit's range joins
// the open bucket, which closes once it holds at least `bucket_elements`.
std::vector<Bucket> plan_buckets(const Units& u, double bucket_elements) {
  const int units = static_cast<int>(u.owned.size());
  std::vector<std::pair<double, double>> ranges;  // [begin, end) of each bucket
  double end = total(u.owned), open = end;
  for (int unit = units - 1; unit >= 0; --unit) {
    if (u.owned[static_cast<size_t>(unit)] == 0) continue;
    open -= u.owned[static_cast<size_t>(unit)];
    if (end - open >= bucket_elements) {
      ranges.push_back({open, end});
      end = open;
    }
  }
  if (end > open) ranges.push_back({open, end});
  std::vector<Bucket> buckets;
  for (const auto& [begin, stop] : ranges) {
    Bucket b;
    b.elements = stop - begin;
    b.complete_unit = units;
    double at = 0;
    for (int unit = 0; unit < units; ++unit) {
      const double from = at, to = at + u.owned[static_cast<size_t>(unit)];
      at = to;
      bool writes = from < stop && begin < to;
      // The head writes the tied table's gradient, which lies in the embedding's range.
      if (unit == units - 1 && u.reads.back() > u.owned.back() && begin < u.table) writes = true;
      if (!writes) continue;
      b.first_unit = std::max(b.first_unit, unit);
      b.complete_unit = std::min(b.complete_unit, unit);
    }
    buckets.push_back(b);
  }
  return buckets;
}

struct UnitAction {
  int unit = 0;
  int microbatch = 0;
  bool backward = false;
};

// A one-stage program's unit actions over units [first, last): 1F1B (and interleaving, without
// pipelining) runs each microbatch's forward and backward in turn, GPipe every forward first. A
// pipeline stage's backward of one microbatch runs its units in a row too, which is all the
// bucket walk needs; its forwards of other microbatches come in between.
std::vector<UnitAction> one_stage_program(const Layout& l, int first, int last) {
  const int microbatches = static_cast<int>(l.microbatches());
  std::vector<UnitAction> actions;
  auto forward = [&](int mb) {
    for (int u = first; u < last; ++u) actions.push_back({u, mb, false});
  };
  auto backward = [&](int mb) {
    for (int u = last - 1; u >= first; --u) actions.push_back({u, mb, true});
  };
  if (l.schedule == config::ScheduleKind::GPipe) {
    for (int mb = 0; mb < microbatches; ++mb) forward(mb);
    for (int mb = 0; mb < microbatches; ++mb) backward(mb);
  } else {
    for (int mb = 0; mb < microbatches; ++mb) {
      forward(mb);
      backward(mb);
    }
  }
  return actions;
}

}  // namespace

double engine_zero_comm_bytes(const ModelConfig& m, const Layout& l, int stage) {
  double peak = 0;
  for (const ZeroCommAction& a : engine_zero_comm_walk(m, l, stage)) peak = std::max(peak, a.bytes);
  return peak;
}

double engine_last_bucket_elements(const ModelConfig& m, const Layout& l) {
  TS_CHECK(l.pp == 1, "plan: the last gradient bucket is computed for one stage (got pp={})", l.pp);
  const double bucket_elements = std::floor(static_cast<double>(static_cast<int64_t>(l.bucket_mb * kMiB)) / kF32);
  const std::vector<Bucket> buckets = plan_buckets(engine_units(m, l), std::max(1.0, bucket_elements));
  return buckets.empty() ? 0.0 : buckets.back().elements;
}

int engine_units_before_first_bucket(const ModelConfig& m, const Layout& l) {
  TS_CHECK(l.pp == 1, "plan: the first gradient bucket is computed for one stage (got pp={})", l.pp);
  const double bucket_elements = std::floor(static_cast<double>(static_cast<int64_t>(l.bucket_mb * kMiB)) / kF32);
  const Units u = engine_units(m, l);
  const std::vector<Bucket> buckets = plan_buckets(u, std::max(1.0, bucket_elements));
  const int units = static_cast<int>(u.owned.size());
  return buckets.empty() ? units : units - buckets.front().complete_unit;
}

double engine_largest_bucket_elements(const ModelConfig& m, const Layout& l) {
  TS_CHECK(l.pp == 1, "plan: the largest gradient bucket is computed for one stage (got pp={})", l.pp);
  const double bucket_elements = std::floor(static_cast<double>(static_cast<int64_t>(l.bucket_mb * kMiB)) / kF32);
  double largest = 0;
  for (const Bucket& b : plan_buckets(engine_units(m, l), std::max(1.0, bucket_elements))) {
    largest = std::max(largest, b.elements);
  }
  return largest;
}

std::vector<ZeroCommAction> engine_zero_comm_walk(const ModelConfig& m, const Layout& l, int stage) {
  TS_CHECK(l.zero_stage >= 2, "plan: the ZeRO-2/3 bucket walk is for ZeRO-2 or 3 (got zero={})", l.zero_stage);
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  Units u = engine_units(m, l);
  const int units = static_cast<int>(u.owned.size());
  const auto [first, last] = stage_units(m, l, stage);
  const bool pipelined = l.pp > 1;
  double kept = 0;  // under a pipeline, ZeRO-3's gathered units: the stage's, all step long
  if (pipelined) {
    // The stage's units alone own gradients here. A tied table is a piece of its own on the last
    // stage, written by the head: counted as the head's.
    const bool tied_head = last == units && u.reads.back() > u.owned.back();
    for (int unit = 0; unit < units; ++unit) {
      if (unit < first || unit >= last) u.owned[static_cast<size_t>(unit)] = 0;
      else kept += u.reads[static_cast<size_t>(unit)];
    }
    if (tied_head && first > 0) u.owned.back() += u.table;
    u.reads.back() = u.owned.back();  // the tie is inside the head's piece, or not on this stage
  }
  // The runtime's size in whole f32 elements (parallel.bucket_mb as the trainer converts it).
  const double bucket_elements = std::floor(static_cast<double>(static_cast<int64_t>(l.bucket_mb * kMiB)) / kF32);
  const std::vector<Bucket> buckets = plan_buckets(u, std::max(1.0, bucket_elements));
  const std::vector<UnitAction> actions = one_stage_program(l, first, last);
  const int n = static_cast<int>(actions.size());

  // Runs of consecutive actions on one unit share one gather (parallel::ParameterGatherer).
  std::vector<int> run_of(static_cast<size_t>(n));
  std::vector<int> run_unit, run_first, run_last;
  for (int i = 0; i < n; ++i) {
    if (run_unit.empty() || run_unit.back() != actions[static_cast<size_t>(i)].unit) {
      run_unit.push_back(actions[static_cast<size_t>(i)].unit);
      run_first.push_back(i);
      run_last.push_back(i);
    }
    run_last.back() = i;
    run_of[static_cast<size_t>(i)] = static_cast<int>(run_unit.size()) - 1;
  }
  // Each (bucket, microbatch) window opens before the first backward writing into it and is
  // reduced after the last.
  std::map<int, std::vector<int>> open_at, post_at;  // action -> buckets
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (int i = 0; i < n; ++i) {
      const UnitAction& a = actions[static_cast<size_t>(i)];
      if (!a.backward) continue;
      if (a.unit == buckets[b].first_unit) open_at[i].push_back(static_cast<int>(b));
      if (a.unit == buckets[b].complete_unit) post_at[i].push_back(static_cast<int>(b));
    }
  }

  std::vector<ZeroCommAction> walk;
  double filling = 0, gathered = 0;
  struct Posted {
    double elements;
    int action;  // after which it was posted
  };
  std::deque<Posted> in_flight;
  std::map<int, double> slots;  // gathered runs -> elements
  auto gather = [&](int run) {
    if (run >= static_cast<int>(run_unit.size()) || slots.count(run)) return;
    slots[run] = u.reads[static_cast<size_t>(run_unit[static_cast<size_t>(run)])];
    gathered += slots[run];
  };
  // Under a pipeline ZeRO-3 gathers each unit before its first action of the step and frees it
  // after its last (parallel::ParameterGatherer): through the middle of the step, where the peak
  // is, the stage holds all of its units at once.
  const bool per_run = l.zero_stage == 3 && !pipelined;
  if (l.zero_stage == 3 && pipelined) gathered = kept;
  for (int i = 0; i < n; ++i) {
    const int run = run_of[static_cast<size_t>(i)];
    if (per_run && run_first[static_cast<size_t>(run)] == i) {
      gather(run);
      gather(run + 1);  // prefetched while this run computes
    }
    for (int b : open_at[i]) {
      // Opening a bucket frees the reductions already done: those posted before the preceding
      // action (the one posted right before is taken to be still on the wire), then the oldest
      // beyond the limit.
      while (!in_flight.empty() && in_flight.front().action < i - 1) in_flight.pop_front();
      while (!l.gradients_to_nvme && in_flight.size() >= kMaxBucketsInFlight) in_flight.pop_front();
      filling += buckets[static_cast<size_t>(b)].elements;
    }
    double in_flight_elements = 0;
    for (const Posted& p : in_flight) in_flight_elements += p.elements;
    const UnitAction& action = actions[static_cast<size_t>(i)];
    walk.push_back({action.unit, action.microbatch, action.backward, kF32 * (gathered + filling + in_flight_elements)});
    for (int b : post_at[i]) {
      filling -= buckets[static_cast<size_t>(b)].elements;
      in_flight.push_back({buckets[static_cast<size_t>(b)].elements, i});
    }
    if (per_run && run_last[static_cast<size_t>(run)] == i) {
      gathered -= slots[run];
      slots.erase(run);
    }
  }
  return walk;
}

double engine_zero3_gathered_elements(const ModelConfig& m, const Layout& l) {
  TS_CHECK(l.pp == 1 && l.zero_stage == 3, "plan: ZeRO-3's gathers are walked for one pipeline stage and ZeRO-3 (got "
           "pp={}, zero={})", l.pp, l.zero_stage);
  const Units u = engine_units(m, l);
  double elements = 0;
  int previous = -1;
  for (const UnitAction& a : one_stage_program(l, 0, static_cast<int>(u.owned.size()))) {
    if (a.unit != previous) elements += u.reads[static_cast<size_t>(a.unit)];
    previous = a.unit;
  }
  return elements;
}

namespace {

// This stage's parameters over ZeRO's shards: the dense ones over dp, the experts over their own
// group, dp / ep.
double zero_shard_elements(const ModelConfig& m, const Layout& l, int stage) {
  const double domain = stage_params(m, l, stage).total();
  const double experts = moe_layers_in_stage(m, l, stage) * moe_expert_params_per_rank(m, l);
  return (domain - experts) / l.dp + experts / (l.dp / l.ep);
}

}  // namespace

double engine_optimizer_elements(const ModelConfig& m, const Layout& l, int stage) {
  // The stage's parameters (a tied table on both of its stages), or ZeRO's shard of them.
  return l.zero_stage >= 1 ? zero_shard_elements(m, l, stage) : stage_params(m, l, stage).total();
}

MemoryBreakdown engine_stage_memory(const ModelConfig& m, const Layout& l, int stage, const PipelineModel& pipeline) {
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  const Units u = engine_units(m, l);
  const double all = total(u.owned);
  const double domain = stage_params(m, l, stage).total();  // the parameters this stage updates
  const double dp = l.dp;
  optim::OptimizerConfig settings;
  settings.kind = l.optimizer;
  const double shard = zero_shard_elements(m, l, stage);

  MemoryBreakdown mem;
  // ZeRO-3 releases the store: a rank keeps its shard of its stage's parameters (the whole model's
  // without pipelining; under expert parallelism the dense ones over dp, the experts' over edp).
  mem.params = kF32 * (l.zero_stage >= 3 ? (l.pp > 1 || l.ep > 1 ? shard : all / dp) : all);
  mem.grads = kF32 * (l.zero_stage >= 2 ? shard : all);
  mem.optimizer = optim::state_bytes_per_parameter(settings) * engine_optimizer_elements(m, l, stage);
  if (l.optimizer == optim::OptimizerKind::Adafactor) mem.optimizer += kF32 * adafactor_state_floats(m, l, stage);
  if (l.optimizer == optim::OptimizerKind::OneBitAdam) {
    // Each rank's server error: its chunk of the dense momentum over dp, and under expert
    // parallelism of the experts' over their own group (optim/one_bit_adam.h).
    const double experts = l.ep > 1 ? moe_layers_in_stage(m, l, stage) * moe_expert_params_per_rank(m, l) : 0.0;
    mem.optimizer += kF32 * ((domain - experts) / dp + experts / std::max(1, l.dp / l.ep));
  }
  const DType compute = compute_dtype(l.precision);
  const double e = static_cast<double>(dtype_size(compute));
  const double boundary = e * l.micro_batch * (m.seq_len / (l.sp ? l.tp : 1)) * static_cast<double>(m.n_embd);
  mem.activations = stage_activation_bytes(m, l, stage, pipeline);
  // Under 1F1B a later stage posts the receive of its next input ahead of the backward it overlaps,
  // into an activation buffer (exec::predict_program_memory counts it too); GPipe's receives all
  // come before its first backward.
  if (stage > 0 && l.schedule != config::ScheduleKind::GPipe) mem.activations += boundary;
  // Sent boundary tensors live until a later unit action finds their transfer done: under 1F1B
  // the latest and the one before; GPipe sends every microbatch's in a row.
  if (l.pp > 1) mem.comm += (l.schedule == config::ScheduleKind::GPipe ? d(l.microbatches()) : 2.0) * boundary;
  if (l.zero_stage >= 2) mem.comm += engine_zero_comm_bytes(m, l, stage);

  const auto [first, last] = stage_units(m, l, stage);
  const std::vector<config::UnitWorkspaceBytes> ws =
      config::unit_workspace_bytes(m, l.micro_batch, m.seq_len, l.tp, l.sp, compute, l.ep);
  // A stage that receives gradients posts the next one ahead: during its forwards in the steady
  // state, and during the backward of its lowest unit as the pipeline drains. Interleaved, every
  // stage receives gradients and a chunk's lowest unit may be any block.
  const bool interleaved = l.virtual_stages > 1;
  const double posted = stage < l.pp - 1 || interleaved ? boundary : 0.0;
  for (int unit = first; unit < last; ++unit) {
    const config::UnitWorkspaceBytes& w = ws[static_cast<size_t>(unit)];
    const bool drains_here = unit == first || (interleaved && unit > 0 && unit <= m.n_layer);
    mem.workspace = std::max({mem.workspace, d(w.forward) + posted, d(w.backward) + (drains_here ? posted : 0.0)});
  }

  if (l.precision == Precision::Bf16) {
    double largest = 0, stage_reads = 0;
    for (int unit = first; unit < last; ++unit) largest = std::max(largest, u.reads[static_cast<size_t>(unit)]);
    stage_reads = l.pp == 1 ? all : domain;
    mem.working_copies = e * (l.zero_stage >= 3 ? largest : stage_reads);
  }
  return mem;
}

}  // namespace tessera::plan
