#include "parity_harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/rng.h"
#include "data/loader.h"
#include "kernels/cpu/grad_norm.h"
#include "parallel/expert_parallel.h"
#include "dist/mpi_runtime.h"
#include "nn/gpt.h"
#include "optim/make_optimizer.h"
#include "parallel/rank_sum.h"
#include "parallel/tensor_parallel.h"

namespace tessera::testing {

config::ModelConfig gpt2_odd_config() {
  config::ModelConfig m;
  m.arch = config::Architecture::Gpt2;
  m.n_layer = 2;
  m.n_head = 3;
  m.n_embd = 15;
  m.vocab_size = 61;
  m.seq_len = 16;
  return m;
}

config::ModelConfig llama_config() {
  config::ModelConfig m;
  m.arch = config::Architecture::Llama;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 53;
  m.seq_len = 16;
  m.bias = false;
  m.tied_embeddings = false;
  return m;
}

config::ModelConfig gpt2_moe_config() {
  config::ModelConfig m;
  m.arch = config::Architecture::Gpt2;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.ffn_hidden = 24;
  m.vocab_size = 37;
  m.seq_len = 8;
  m.dropout = 0.1f;
  m.moe_experts = 4;
  m.moe_top_k = 1;
  m.moe_capacity_factor = 0.75f;  // 3 of a microbatch's 16 tokens per expert: at least 4 drop
  m.moe_aux_loss_coef = 0.05f;
  m.moe_z_loss_coef = 0.01f;
  return m;
}

config::ModelConfig llama_moe_config() {
  config::ModelConfig m = llama_config();
  m.n_head = 2;
  m.n_embd = 16;
  m.ffn_hidden = 32;
  m.seq_len = 8;
  m.moe_experts = 4;
  m.moe_top_k = 2;
  m.moe_capacity_factor = 1.0f;
  m.moe_every = 2;  // block 1 only: dense and MoE blocks side by side
  m.moe_aux_loss_coef = 0.05f;
  m.moe_z_loss_coef = 0.01f;
  return m;
}

void synthetic_rows(const ParityCase& c, int step, int64_t begin, int64_t rows, std::vector<int32_t>& inputs,
                    std::vector<int32_t>& targets) {
  const int T = c.seq_len;
  inputs.resize(static_cast<size_t>(rows * T));
  targets.resize(static_cast<size_t>(rows * T));
  for (int64_t r = 0; r < rows; ++r) {
    for (int t = 0; t <= T; ++t) {
      const uint64_t index = static_cast<uint64_t>((begin + r) * (T + 1) + t);
      const auto token = static_cast<int32_t>(uniform(c.seed, 1000 + static_cast<uint64_t>(step), index) *
                                              static_cast<float>(c.model.vocab_size));
      if (t < T) inputs[static_cast<size_t>(r * T + t)] = token;
      if (t > 0) targets[static_cast<size_t>(r * T + t - 1)] = token;
    }
  }
}

namespace {


std::vector<float> flat_copy(nn::ParameterStore& params, nn::ParameterAccess& values) {
  std::vector<float> out(static_cast<size_t>(params.numel()));
  for (const auto& p : params.all()) {
    const float* v = values.weight(p).data<float>();
    std::copy(v, v + p.numel(), out.begin() + static_cast<int64_t>(p.offset));
  }
  return out;
}

// Every parameter's one-process value, in the one-process model's flat order (the store's
// declaration order, each without its padding), gathered over the tensor-parallel group.
std::vector<float> gathered_copy(nn::ParameterStore& params, nn::ParameterAccess& values, dist::Communicator* tp,
                                 dist::Communicator* ep = nullptr) {
  std::vector<float> out;
  for (const auto& p : params.all()) {
    const Tensor v = values.weight(p);
    const std::span<const float> mine(v.data<float>(), static_cast<size_t>(p.numel()));
    const std::vector<float> whole = p.spec.replicated_over(config::MeshDim::EP)
                                         ? parallel::gather_parameter(tp, p, mine)
                                         : parallel::gather_parameter(ep, p, mine, config::MeshDim::EP);
    out.insert(out.end(), whole.begin(), whole.end());
  }
  return out;
}

dist::CommStats delta(const dist::CommStats& after, const dist::CommStats& before) {
  dist::CommStats d;
  d.collectives = after.collectives - before.collectives;
  d.point_to_point = after.point_to_point - before.point_to_point;
  d.bytes_sent = after.bytes_sent - before.bytes_sent;
  for (size_t k = 0; k < d.by_op.size(); ++k) {
    d.by_op[k].ops = after.by_op[k].ops - before.by_op[k].ops;
    d.by_op[k].bytes_sent = after.by_op[k].bytes_sent - before.by_op[k].bytes_sent;
  }
  return d;
}

// The outermost transform: sees each action after every other transform finished with it, and
// records the bytes each microbatch's actions sent and the reductions posted after each unit's
// backward in the last microbatch.
class Recorder final : public exec::Transform {
 public:
  Recorder(dist::Communicator* comm, int stage, size_t units) : comm_(comm), stage_(stage), units_(units) {}
  std::string_view name() const override { return "parity recorder"; }
  void begin(const exec::Program& program) override {
    first_.assign(static_cast<size_t>(program.microbatches), -1);
    last_.assign(static_cast<size_t>(program.microbatches), -1);
    for (int i = 0; i < static_cast<int>(program.actions.size()); ++i) {
      const exec::Action& a = program.actions[static_cast<size_t>(i)];
      if (a.kind != exec::Action::Kind::Unit) continue;
      if (first_[static_cast<size_t>(a.microbatch)] < 0) first_[static_cast<size_t>(a.microbatch)] = i;
      last_[static_cast<size_t>(a.microbatch)] = i;
    }
    micro_bytes.assign(first_.size(), 0);
    after_unit.assign(units_, 0);
  }
  void before(const exec::Event& e) override {
    if (first_[static_cast<size_t>(e.microbatch)] != e.index) return;
    bytes_start_ = sent();
    reductions_start_ = reductions();
  }
  void after(const exec::Event& e) override {
    const bool last_microbatch = e.microbatch + 1 == static_cast<int>(first_.size());
    if (last_microbatch && (e.phase == exec::Phase::Backward || e.phase == exec::Phase::BackwardWeight)) {
      after_unit[static_cast<size_t>(e.unit)] = reductions() - reductions_start_;
    }
    if (last_[static_cast<size_t>(e.microbatch)] == e.index) {
      micro_bytes[static_cast<size_t>(e.microbatch)] = sent() - bytes_start_;
    }
  }

  std::vector<uint64_t> micro_bytes;
  std::vector<uint64_t> after_unit;

 private:
  uint64_t sent() const { return comm_ ? comm_->stats().bytes_sent : 0; }
  uint64_t reductions() const {
    if (comm_ == nullptr) return 0;
    return comm_->stats().of(stage_ == 0 ? dist::OpKind::AllReduce : dist::OpKind::ReduceScatter).ops;
  }
  dist::Communicator* comm_;
  int stage_;
  size_t units_;
  std::vector<int> first_, last_;
  uint64_t bytes_start_ = 0, reductions_start_ = 0;
};

}  // namespace

void PoisonGradient::before(const exec::Event& e) {
  if (enabled_ && seen_ == program_ && e.unit == 0 && !exec::is_forward(e.phase)) {
    ownership_.grad(p_).data<float>()[0] = std::numeric_limits<float>::infinity();
  }
}

void check_matches_reference(const RunRecord& run, const RunRecord& ref, const std::string& what, RankChecks& t) {
  t.expect(run.steps.size() == ref.steps.size(),
           fmt::format("{}: {} steps recorded, the reference {}", what, run.steps.size(), ref.steps.size()));
  for (size_t s = 0; s < std::min(run.steps.size(), ref.steps.size()); ++s) {
    t.expect(std::abs(run.steps[s].loss - ref.steps[s].loss) <= 1e-5 * std::abs(ref.steps[s].loss),
             fmt::format("{}: step {} loss {:.9g} vs single-process {:.9g}", what, s + 1, run.steps[s].loss,
                         ref.steps[s].loss));
    t.expect(std::abs(run.steps[s].grad_norm - ref.steps[s].grad_norm) <= 1e-5 * std::abs(ref.steps[s].grad_norm),
             fmt::format("{}: step {} gradient norm {:.9g} vs single-process {:.9g}", what, s + 1,
                         run.steps[s].grad_norm, ref.steps[s].grad_norm));
  }
  double worst = 0;
  for (size_t i = 0; i < std::min(run.params.size(), ref.params.size()); ++i) {
    worst = std::max(worst, std::abs(double(run.params[i]) - ref.params[i]) / std::max(1.0, std::abs(double(ref.params[i]))));
  }
  t.expect(run.params.size() == ref.params.size() && worst <= 1e-4,
           fmt::format("{}: {} parameters differ from the single-process run's {} by {:.3g}", what, run.params.size(),
                       ref.params.size(), worst));
}

void check_tracks_fp32(const RunRecord& run, const RunRecord& fp32, const std::string& what, RankChecks& t) {
  t.expect(run.steps.size() == fp32.steps.size(),
           fmt::format("{}: {} steps, the fp32 run {}", what, run.steps.size(), fp32.steps.size()));
  double worst = 0;
  for (size_t s = 0; s < std::min(run.steps.size(), fp32.steps.size()); ++s) {
    worst = std::max(worst, std::abs(run.steps[s].loss - fp32.steps[s].loss) / std::abs(fp32.steps[s].loss));
  }
  t.expect(worst <= 0.02, fmt::format("{}: losses {:.3g} (relative) from fp32's, above 2%", what, worst));
  for (const StepRecord& s : run.steps) t.expect(!s.skipped, fmt::format("{}: a step was skipped", what));
  if (t.rank == 0) fmt::print("{}: worst loss gap to fp32 {:.2e}\n", what, worst);
}

void check_activation_prediction(const RunRecord& run, const std::string& what, RankChecks& t) {
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const auto measured = static_cast<int64_t>(run.steps[s].memory.peak_of(MemoryTag::Activations));
    t.expect(measured == run.steps[s].predicted_activations,
             fmt::format("{}: step {} activation peak on rank {}: measured {} bytes, predicted {}", what, s + 1, t.rank,
                         measured, run.steps[s].predicted_activations));
  }
}

int agree_on_failures(const RankChecks& checks, dist::Communicator& world) {
  const double mine = checks.failures;
  const double total = parallel::sum_over_ranks(&world, std::span(&mine, 1))[0];
  if (checks.rank == 0) {
    fmt::print("{} checks passed on rank 0; {} failures over {} ranks\n", checks.passed, total, world.size());
  }
  return total == 0 ? 0 : 1;
}

int run_rank_checks(int argc, char** argv, const std::function<void(dist::Communicator& world, RankChecks& t)>& body,
                    bool check_sequence) {
  dist::MpiRuntime mpi(&argc, &argv);
  RankChecks t;
  t.rank = mpi.world_rank();
  try {
    dist::CommOptions options;
    options.timeout_seconds = 60;
    options.check_sequence = check_sequence;  // a rank out of step fails loudly instead of hanging
    auto world = mpi.world(options);
    body(*world, t);
    const int code = agree_on_failures(t, *world);
    world.reset();
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", t.rank, e.what());
    mpi.abort_job(1);
  }
}

namespace {

// A one-process model with its optimizer over every parameter: what the references start from.
struct OneProcess {
  explicit OneProcess(const ParityCase& c)
      : model(c.model, memory, c.seed),
        store(model.parameters()),
        whole(optim::whole_parameters(store)),
        opt(optim::make_optimizer(memory, c.optimizer, store, whole, nullptr)),
        N(store.numel()),
        scale(1.0f / static_cast<float>(c.global_batch * c.seq_len)),
        values(store.flat_values().data<float>()) {}
  MemoryAccountant memory;
  nn::GPT model;
  nn::ParameterStore& store;
  const std::vector<optim::Segment> whole;
  std::unique_ptr<optim::Optimizer> opt;
  const int64_t N;
  const float scale;  // of each token's loss: one over the global batch's tokens
  float* values;
};

// The one-process run the references share. From step `delayed_from` on (never when it is past
// the run), step t's gradient is taken at W(t - 1) and applied to W(t) (two copies of the weights
// kept by hand): PipeDream-2BW's update from step 1, the delayed parameter update from its start.
RunRecord run_one_process(const ParityCase& c, int delayed_from) {
  OneProcess one(c);
  auto& [memory, model, store, whole, opt, N, scale, values] = one;
  std::vector<float> older(values, values + N);  // W(t - 1) at step t
  RunRecord rec;
  rec.numel = rec.shard = N;
  std::vector<int32_t> inputs, targets;
  for (int step = 0; step < c.steps; ++step) {
    const bool delayed = step >= delayed_from;
    std::vector<float> newest;  // W(step), while the gradient is taken at the older weights
    if (delayed) {
      newest.assign(values, values + N);
      std::copy(older.begin(), older.end(), values);
    }
    store.zero_grads();
    synthetic_rows(c, step, 0, c.global_batch, inputs, targets);
    nn::StepContext ctx{memory, store};
    ctx.seed = c.seed;
    ctx.step = static_cast<uint64_t>(step);
    nn::GPT::Ctx fwd;
    const double sum = model.forward(ctx, fwd, inputs.data(), targets.data(), c.global_batch, c.seq_len, scale);
    model.backward(ctx, fwd);
    if (delayed) std::copy(newest.begin(), newest.end(), values);
    const std::pair<float*, size_t> all{store.flat_grads().data<float>(), static_cast<size_t>(N)};
    StepRecord s;
    s.loss = sum * static_cast<double>(scale);
    s.grad_norm = kernels::clip_grad_norm(std::span(&all, 1), c.grad_clip);
    const std::vector<float> before(values, values + N);
    opt->step(c.lr, whole);
    older = delayed ? std::move(newest) : before;
    rec.steps.push_back(s);
  }
  rec.params = flat_copy(store, store);
  return rec;
}

}  // namespace

RunRecord run_reference_2bw_newest(const ParityCase& c, int dp, int pp) {
  TS_CHECK(!c.model.tied_embeddings, "the newest-version 2BW reference reads each parameter at one version per stage; "
           "a tied embedding belongs to two stages");
  TS_CHECK(static_cast<int>(c.stage_layers.size()) == pp, "the reference needs the blocks of each of the {} stages",
           pp);
  OneProcess one(c);
  auto& [memory, model, store, whole, opt, N, scale, values] = one;
  // The elements each stage owns: the embedding with the first blocks, the head with the last.
  std::vector<std::vector<nn::ParamRange>> owned(static_cast<size_t>(pp));
  {
    int stage = 0;
    int64_t blocks_left = c.stage_layers.front();
    for (const nn::Unit& unit : model.units()) {
      if (unit.kind == nn::UnitKind::Block) {
        while (blocks_left == 0) blocks_left = c.stage_layers[static_cast<size_t>(++stage)];
        --blocks_left;
      }
      const int at = unit.kind == nn::UnitKind::Head ? pp - 1 : stage;
      owned[static_cast<size_t>(at)].push_back(unit.owned);
    }
  }
  std::vector<float> older(values, values + N);  // W(max(0, t - 1)) at step t
  RunRecord rec;
  rec.numel = rec.shard = N;
  std::vector<int32_t> inputs, targets;
  for (int step = 0; step < c.steps; ++step) {
    const std::vector<float> newest(values, values + N);
    store.zero_grads();
    double sum = 0;
    for (int j = 0; j < c.micros; ++j) {
      for (int s = 0; s < pp; ++s) {
        const bool stale = step >= 1 && j <= pp - 2 - s;
        const std::vector<float>& version = stale ? older : newest;
        for (const nn::ParamRange& r : owned[static_cast<size_t>(s)]) {
          std::copy(version.begin() + r.begin, version.begin() + r.end, values + r.begin);
        }
      }
      for (int d = 0; d < dp; ++d) {
        const data::RowRange mine = data::split_rows(c.global_batch, d, dp);
        const data::RowRange rows = data::split_rows(mine.size(), j, c.micros);
        const int64_t begin = mine.begin + rows.begin;
        const int B = static_cast<int>(rows.size());
        synthetic_rows(c, step, begin, B, inputs, targets);
        nn::StepContext ctx{memory, store};
        ctx.seed = c.seed;
        ctx.step = static_cast<uint64_t>(step);
        ctx.sample_offset = begin;
        nn::GPT::Ctx fwd;
        sum += model.forward(ctx, fwd, inputs.data(), targets.data(), B, c.seq_len, scale);
        model.backward(ctx, fwd);
      }
    }
    std::copy(newest.begin(), newest.end(), values);
    const std::pair<float*, size_t> all{store.flat_grads().data<float>(), static_cast<size_t>(N)};
    StepRecord s;
    s.loss = sum * static_cast<double>(scale);
    s.grad_norm = kernels::clip_grad_norm(std::span(&all, 1), c.grad_clip);
    opt->step(c.lr, whole);
    older = newest;
    rec.steps.push_back(s);
  }
  rec.params = flat_copy(store, store);
  return rec;
}

RunRecord run_reference(const ParityCase& c) { return run_one_process(c, c.steps); }

RunRecord run_reference_2bw(const ParityCase& c) { return run_one_process(c, 1); }

RunRecord run_reference_delayed_update(const ParityCase& c) {
  return run_one_process(c, static_cast<int>(c.delayed_update_after) + 1);
}

RunRecord run_data_parallel(const ParityCase& c, dist::Communicator* comm) {
  if (comm == nullptr) return run_parallel(c, nullptr);
  config::ParallelLayout layout;
  layout.dp = comm->size();
  const dist::Mesh mesh(*comm, layout);
  return run_parallel(c, &mesh);
}

RunRecord run_pipelined(const ParityCase& c, dist::Communicator& world) {
  config::ParallelLayout layout;
  layout.pp = world.size();
  const dist::Mesh mesh(world, layout);
  return run_parallel(c, &mesh);
}

std::vector<float> initial_parameters(const config::ModelConfig& model_config, uint64_t seed, dist::Communicator& tp) {
  MemoryAccountant memory;
  const parallel::TensorParallelPlan plan(model_config, tp.size(), tp.rank());
  nn::GPT model(model_config, memory, seed, &plan);
  return gathered_copy(model.parameters(), model.parameters(), &tp);
}

RunRecord run_parallel(const ParityCase& c, const dist::Mesh* mesh) {
  dist::Communicator* comm = mesh ? &mesh->dp() : nullptr;
  dist::Communicator* tp = mesh && mesh->layout().tp > 1 ? &mesh->tp() : nullptr;
  dist::Communicator* ep = mesh && mesh->layout().ep > 1 ? &mesh->ep() : nullptr;
  MemoryAccountant memory;
  const int tp_size = tp ? tp->size() : 1, ep_size = ep ? ep->size() : 1;
  const parallel::TensorParallelPlan tensor_plan(c.model, tp_size, tp ? tp->rank() : 0);
  const parallel::ExpertParallelPlan plan(c.model, ep_size, ep ? ep->rank() : 0, &tensor_plan);
  nn::GPT model(c.model, memory, c.seed, &plan);
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  const data::RowRange mine = data::split_rows(c.global_batch, rank, ranks);
  parallel::EngineOptions options;
  options.layout.dp = ranks;
  options.layout.pp = mesh ? mesh->layout().pp : 1;
  options.layout.tp = tp_size;
  options.layout.ep = ep_size;
  options.layout.sp = c.sequence_parallel;
  options.layout.virtual_stages = c.virtual_stages;
  options.layout.zero_stage = c.zero_stage;
  options.layout.schedule = c.schedule;
  options.layout.micro_batch = static_cast<int>(mine.size() / c.micros);
  options.layout.global_batch = c.global_batch;
  options.bucket_bytes = c.bucket_bytes;
  options.optimizer = c.optimizer;
  options.seq_len = c.seq_len;
  options.recompute = c.recompute;
  options.compression = c.compression;
  options.measure_unit_times = false;  // a plan from FLOPs: the same on every run of the test
  options.precision = c.precision;
  options.two_bw_versions = c.two_bw_versions;
  options.stage_layers = c.stage_layers;
  options.delayed_update_after = c.delayed_update_after;
  parallel::TrainingEngine engine(model, memory, mesh, options);
  Recorder recorder(comm, c.zero_stage, model.units().size());
  engine.transforms().add(exec::TransformSlot::Observer, recorder);
  const float scale = 1.0f / static_cast<float>(c.global_batch * c.seq_len);
  RunRecord rec;
  rec.numel = model.parameters().numel();
  rec.shard = engine.data_parallel().layout().shard_size(rank);
  rec.domain = engine.data_parallel().layout().numel();
  rec.domain_pieces = engine.data_parallel().layout().pieces().size();
  rec.master = optim::total_elements(engine.ownership().master_segments());
  rec.comm_bound = engine.data_parallel().comm_bound_bytes();
  rec.buckets = engine.data_parallel().buckets().size();
  rec.weight_stash_bytes = memory.stats().live_of(MemoryTag::WeightStash);
  if (c.zero_stage == 0) {  // under ZeRO the optimizer holds parts of parameters
    for (const nn::Parameter* p : engine.optimizer_parameters()) {
      rec.optimizer_param_bytes += static_cast<size_t>(p->numel()) * sizeof(float);
    }
  }
  for (const exec::Action& a : engine.program().actions) {
    if (a.kind == exec::Action::Kind::Unit) rec.program_units.push_back(a.unit);
  }
  rec.program = engine.program();
  exec::TimelineRecorder timeline;
  if (!c.steps_per_call.empty()) {
    int step = 0;
    for (const int count : c.steps_per_call) {
      std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(count * c.micros)), targets(inputs.size());
      std::vector<exec::MicrobatchInput> microbatches;
      std::vector<float> lrs(static_cast<size_t>(count), c.lr);
      for (int b = 0; b < count; ++b) {
        for (int m = 0; m < c.micros; ++m) {
          const size_t k = static_cast<size_t>(b * c.micros + m);
          const data::RowRange rows = data::split_rows(mine.size(), m, c.micros);
          synthetic_rows(c, step + b, mine.begin + rows.begin, rows.size(), inputs[k], targets[k]);
          const int B = static_cast<int>(rows.size());
          microbatches.push_back({{nn::token_tensor(inputs[k].data(), B, c.seq_len),
                                   nn::token_tensor(targets[k].data(), B, c.seq_len), scale},
                                  mine.begin + rows.begin});
        }
      }
      memory.reset_peaks();
      const std::vector<parallel::TrainingEngine::StepResult> results =
          engine.train_batches(microbatches, {c.seed, static_cast<uint64_t>(step)}, lrs, c.grad_clip);
      for (const parallel::TrainingEngine::StepResult& r : results) {
        StepRecord s;
        s.loss = parallel::sum_over_ranks(comm, std::span(&r.loss_sum, 1))[0] * static_cast<double>(scale);
        s.grad_norm = r.grad_norm.norm;
        s.memory = memory.stats();
        rec.steps.push_back(s);
      }
      step += count;
    }
    TS_CHECK(step == c.steps, "the test's calls cover {} steps, not {}", step, c.steps);
  }
  std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(c.micros)), targets(static_cast<size_t>(c.micros));
  for (int step = 0; step < c.steps && c.steps_per_call.empty(); ++step) {
    memory.reset_peaks();
    const dist::CommStats before = comm ? comm->stats() : dist::CommStats{};
    const dist::CommStats tensor_before = tp ? tp->stats() : dist::CommStats{};
    const dist::CommStats expert_before = ep ? ep->stats() : dist::CommStats{};
    std::vector<exec::MicrobatchInput> microbatches;
    for (int m = 0; m < c.micros; ++m) {
      const data::RowRange rows = data::split_rows(mine.size(), m, c.micros);
      synthetic_rows(c, step, mine.begin + rows.begin, rows.size(), inputs[static_cast<size_t>(m)],
                     targets[static_cast<size_t>(m)]);
      const int B = static_cast<int>(rows.size());
      microbatches.push_back({{nn::token_tensor(inputs[static_cast<size_t>(m)].data(), B, c.seq_len),
                               nn::token_tensor(targets[static_cast<size_t>(m)].data(), B, c.seq_len), scale},
                              mine.begin + rows.begin});
    }
    const bool record = c.record_timeline && step + 1 == c.steps;
    const parallel::TrainingEngine::StepResult r = engine.train_step(
        microbatches, {c.seed, static_cast<uint64_t>(step), record ? &timeline : nullptr}, c.lr, c.grad_clip);
    if (record) {
      rec.spans = timeline.spans();
      rec.timeline = engine.measured_timeline(timeline);  // collective over the pipeline group
    }
    StepRecord s;
    s.loss = parallel::sum_over_ranks(comm, std::span(&r.loss_sum, 1))[0] * static_cast<double>(scale);
    s.grad_norm = r.grad_norm.norm;
    s.memory = memory.stats();
    if (comm) s.comm = delta(comm->stats(), before);
    if (tp) s.tensor_comm = delta(tp->stats(), tensor_before);
    s.micro_bytes = recorder.micro_bytes;
    s.reductions_after_unit = recorder.after_unit;
    s.predicted_activations = engine.predicted_activation_peak();
    s.skipped = r.skipped;
    s.loss_scale = r.loss_scale;
    s.moe = r.moe;
    if (ep) s.expert_comm = delta(ep->stats(), expert_before);
    rec.steps.push_back(s);
  }
  engine.transforms().remove(exec::TransformSlot::Observer);
  engine.apply_delayed_update();  // the last step's update, which a delayed run leaves running
  parallel::DataParallel::FullParameters full = engine.full_parameters();
  rec.params = tp_size > 1 || ep_size > 1 ? gathered_copy(model.parameters(), full, tp, ep)
                                          : flat_copy(model.parameters(), full);
  return rec;
}

}  // namespace tessera::testing
