#include "parity_harness.h"

#include "core/rng.h"
#include "data/loader.h"
#include "kernels/cpu/grad_norm.h"
#include "nn/gpt.h"
#include "parallel/rank_sum.h"

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

optim::AdamWConfig adam() { return {0.9f, 0.95f, 1e-8f, 0.1f}; }

std::vector<float> flat_copy(nn::ParameterStore& params) {
  std::vector<float> out(static_cast<size_t>(params.numel()));
  for (const auto& p : params.all()) {
    const float* v = p.value.data<float>();
    std::copy(v, v + p.numel(), out.begin() + static_cast<int64_t>(p.offset));
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

// Passes every hook on to the engine and counts the reductions posted after each unit's backward.
class RecordingHooks final : public nn::ExecutionHooks {
 public:
  RecordingHooks(parallel::DataParallel& dp, dist::Communicator* comm, size_t units)
      : dp_(dp), comm_(comm), after_unit(units, 0) {}
  void before_forward(int u) override { dp_.before_forward(u); }
  void after_forward(int u) override { dp_.after_forward(u); }
  void before_backward(int u) override { dp_.before_backward(u); }
  void after_backward(int u) override {
    dp_.after_backward(u);
    if (comm_ == nullptr) return;
    const auto kind = dp_.zero_stage() == 0 ? dist::OpKind::AllReduce : dist::OpKind::ReduceScatter;
    after_unit[static_cast<size_t>(u)] = comm_->stats().of(kind).ops - start_;
  }
  void start() {
    const auto kind = dp_.zero_stage() == 0 ? dist::OpKind::AllReduce : dist::OpKind::ReduceScatter;
    start_ = comm_ ? comm_->stats().of(kind).ops : 0;
  }

 private:
  parallel::DataParallel& dp_;
  dist::Communicator* comm_;
  uint64_t start_ = 0;

 public:
  std::vector<uint64_t> after_unit;
};

}  // namespace

RunRecord run_reference(const ParityCase& c) {
  MemoryAccountant memory;
  nn::GPT model(c.model, memory, c.seed);
  optim::AdamW opt(model.parameters(), memory, adam());
  const int64_t N = model.parameters().numel();
  const float scale = 1.0f / static_cast<float>(c.global_batch * c.seq_len);
  RunRecord rec;
  rec.numel = rec.shard = N;
  std::vector<int32_t> inputs, targets;
  for (int step = 0; step < c.steps; ++step) {
    model.parameters().zero_grads();
    synthetic_rows(c, step, 0, c.global_batch, inputs, targets);
    nn::StepContext ctx{memory};
    nn::GPT::Ctx fwd;
    const double sum = model.forward(ctx, fwd, inputs.data(), targets.data(), c.global_batch, c.seq_len, scale);
    model.backward(ctx, fwd);
    const std::pair<float*, size_t> all{model.parameters().flat_grads().data<float>(), static_cast<size_t>(N)};
    StepRecord s;
    s.loss = sum * static_cast<double>(scale);
    s.grad_norm = kernels::clip_grad_norm(std::span(&all, 1), c.grad_clip);
    opt.step(c.lr);
    rec.steps.push_back(s);
  }
  rec.params = flat_copy(model.parameters());
  return rec;
}

RunRecord run_data_parallel(const ParityCase& c, dist::Communicator* comm) {
  MemoryAccountant memory;
  nn::GPT model(c.model, memory, c.seed);
  parallel::DataParallel dp(model.parameters(), model.units(), comm, memory, {c.zero_stage, c.bucket_bytes}, adam());
  const float scale = 1.0f / static_cast<float>(c.global_batch * c.seq_len);
  const data::RowRange mine = data::split_rows(c.global_batch, dp.rank(), dp.ranks());
  RunRecord rec;
  rec.numel = model.parameters().numel();
  rec.shard = dp.layout().shard(dp.rank()).size();
  rec.comm_bound = dp.comm_bound_bytes();
  rec.buckets = dp.buckets().size();
  std::vector<int32_t> inputs, targets;
  for (int step = 0; step < c.steps; ++step) {
    memory.reset_peaks();
    const dist::CommStats before = comm ? comm->stats() : dist::CommStats{};
    dp.begin_step();
    StepRecord s;
    double sum = 0;
    for (int m = 0; m < c.micros; ++m) {
      const data::RowRange rows = data::split_rows(mine.size(), m, c.micros);
      synthetic_rows(c, step, mine.begin + rows.begin, rows.size(), inputs, targets);
      RecordingHooks hooks(dp, comm, model.units().size());
      nn::StepContext ctx{memory};
      ctx.hooks = &hooks;
      nn::GPT::Ctx fwd;
      const uint64_t bytes_before = comm ? comm->stats().bytes_sent : 0;
      dp.begin_microbatch(m, c.micros);
      hooks.start();
      sum += model.forward(ctx, fwd, inputs.data(), targets.data(), static_cast<int>(rows.size()), c.seq_len, scale);
      model.backward(ctx, fwd);
      s.micro_bytes.push_back(comm ? comm->stats().bytes_sent - bytes_before : 0);
      dp.end_microbatch();
      s.reductions_after_unit = hooks.after_unit;
    }
    s.loss = parallel::sum_over_ranks(comm, std::span(&sum, 1))[0] * static_cast<double>(scale);
    s.grad_norm = dp.clip_grad_norm(c.grad_clip);
    dp.optimizer_step(c.lr);
    s.memory = memory.stats();
    if (comm) s.comm = delta(comm->stats(), before);
    rec.steps.push_back(s);
  }
  auto full = dp.full_parameters();
  rec.params = flat_copy(model.parameters());
  return rec;
}

}  // namespace tessera::testing
