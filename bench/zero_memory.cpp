// Per-rank memory of each ZeRO stage at dp = 1, 2, 4, 8 for the GPT-2 124M shape: the allocator's
// measurement of one rank running one real training step (forward, backward, reduction, AdamW)
// through parallel::DataParallel, against the formulas of parallel/zero_memory.h.
//
// One process plays rank 0 of a group of N: its communicator is a stand-in that completes every
// operation at once without moving data. What a rank allocates does not depend on the values its
// peers send, so the per-tag bytes are exactly those of a real N-rank job (tests/parallel checks
// the same accounting under mpirun at 2 and 4 ranks) while the machine holds one rank at a time.
// The step is a short one (B = 1, T = 64): activations are not the subject here.
//
//   zero_memory [--dp 1,2,4,8] [--tokens 64] [--json out.json] [--svg out.svg]
//
// Prints a markdown table and, last, one JSON line {"bench": "zero_memory", ...}.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "io/loss_chart.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"
#include "parallel/zero_memory.h"

using namespace tessera;

namespace {

// Rank `rank` of a group of `size` whose peers are absent: every operation completes when posted;
// byte counters follow the convention of dist/ops.h.
class StandInGroup final : public dist::Communicator {
 public:
  StandInGroup(int rank, int size) : rank_(rank), size_(size) {
    for (int r = 0; r < size; ++r) ranks_.push_back(r);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& group_ranks() const override { return ranks_; }
  const std::string& name() const override { return name_; }
  dist::CommStats stats() const override { return stats_; }
  const dist::CommOptions& options() const override { return options_; }

  dist::WorkPtr all_reduce(void*, size_t count, DType dtype, dist::ReduceOp) override {
    return done(dist::OpKind::AllReduce, dist::all_reduce_bytes(count, dtype_size(dtype), size_));
  }
  dist::WorkPtr reduce_scatter(const void*, void*, std::span<const size_t> counts, DType dtype, dist::ReduceOp) override {
    return done(dist::OpKind::ReduceScatter, dist::reduce_scatter_bytes(counts, dtype_size(dtype), rank_));
  }
  dist::WorkPtr all_gather(const void*, void*, std::span<const size_t> counts, DType dtype) override {
    return done(dist::OpKind::AllGather, dist::all_gather_bytes(counts, dtype_size(dtype), rank_));
  }
  dist::WorkPtr broadcast(void*, size_t count, DType dtype, int root) override {
    return done(dist::OpKind::Broadcast, dist::broadcast_bytes(count, dtype_size(dtype), rank_, size_, root));
  }
  dist::WorkPtr all_to_all(const void*, std::span<const size_t> send, void*, std::span<const size_t>, DType dtype) override {
    return done(dist::OpKind::AllToAll, dist::all_to_all_bytes(send, dtype_size(dtype), rank_));
  }
  dist::WorkPtr send(const void*, size_t count, DType dtype, int, int, std::string) override {
    return done(dist::OpKind::Send, count * dtype_size(dtype));
  }
  dist::WorkPtr recv(void*, size_t, DType, int, int, std::string) override { return done(dist::OpKind::Recv, 0); }
  dist::WorkPtr barrier() override { return done(dist::OpKind::Barrier, 0); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    TS_FAIL("the stand-in group cannot split");
  }

 private:
  dist::WorkPtr done(dist::OpKind kind, uint64_t bytes) {
    auto& counter = stats_.by_op[static_cast<size_t>(kind)];
    ++counter.ops;
    counter.bytes_sent += bytes;
    stats_.bytes_sent += bytes;
    ++(dist::is_collective(kind) ? stats_.collectives : stats_.point_to_point);
    auto w = std::make_shared<dist::Work>(kind, seq_++, bytes);
    w->mark_completed();
    return w;
  }
  int rank_, size_;
  std::vector<int> ranks_;
  std::string name_ = "dp (stand-in)";
  dist::CommOptions options_;
  dist::CommStats stats_;
  uint64_t seq_ = 0;
};

struct Row {
  int stage = 0, dp = 1;
  int64_t numel = 0, shard = 0;
  MemoryStats stats;
  parallel::ZeroBytes formula;
  size_t comm_bound = 0;
  uint64_t bytes_sent = 0;
};

Row measure(int stage, int dp, int tokens) {
  MemoryAccountant memory;
  nn::GPT model(config::gpt2_124m(), memory, 1);
  StandInGroup world(0, dp);
  parallel::EngineOptions options;
  options.layout.dp = dp;
  options.layout.zero_stage = stage;
  options.layout.global_batch = dp;  // one sequence per rank
  options.seq_len = tokens;
  // Rank 0's groups: the data-parallel ones (dp and edp) of all dp ranks, the others of itself.
  std::array<std::unique_ptr<dist::Communicator>, config::kMeshDims.size()> groups;
  for (const config::MeshDim dim : config::kMeshDims) {
    const bool data_parallel = dim == config::MeshDim::DP || dim == config::MeshDim::EDP;
    groups[static_cast<size_t>(dim)] = std::make_unique<StandInGroup>(0, data_parallel ? dp : 1);
  }
  StandInGroup& group = static_cast<StandInGroup&>(*groups[static_cast<size_t>(config::MeshDim::DP)]);
  const dist::Mesh mesh(world, options.layout, std::move(groups));
  parallel::TrainingEngine engine(model, memory, &mesh, options);
  std::vector<int32_t> inputs(static_cast<size_t>(tokens)), targets(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) inputs[static_cast<size_t>(t)] = targets[static_cast<size_t>(t)] = (t * 7919) % 50257;
  memory.reset_peaks();  // the step only, not the construction (which holds the whole model once)
  const exec::MicrobatchInput input{{nn::token_tensor(inputs.data(), 1, tokens), nn::token_tensor(targets.data(), 1, tokens),
                                     1.0f / static_cast<float>(tokens)},
                                    0};
  engine.train_step(std::span(&input, 1), {}, 1e-4f, 1.0);
  Row row{stage, dp, model.parameters().numel(), engine.data_parallel().layout().shard_size(0), memory.stats(), {}, 0, 0};
  row.formula = parallel::zero_bytes(stage, row.numel, row.shard);
  row.comm_bound = engine.data_parallel().comm_bound_bytes();
  row.bytes_sent = group.stats().bytes_sent;
  return row;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> dps{1, 2, 4, 8};
  int tokens = 64;
  std::string json_path, svg_path;
  CLI::App app{"per-rank memory of ZeRO stages 0-3 for the GPT-2 124M shape"};
  app.add_option("--dp", dps)->delimiter(',');
  app.add_option("--tokens", tokens);
  app.add_option("--json", json_path);
  app.add_option("--svg", svg_path);
  CLI11_PARSE(app, argc, argv);

  std::vector<Row> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    for (int dp : dps) rows.push_back(measure(stage, dp, tokens));
  }
  fmt::print("GPT-2 124M: Ψ = {} parameters; one rank (rank 0) per row; GiB = 2^30 bytes\n\n", rows[0].numel);
  fmt::print("| stage | dp | params | grads | optimizer | sum (measured) | formula | matches | comm peak (bound) | "
             "activations peak | bytes sent / step |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json out = {{"bench", "zero_memory"}, {"numel", rows[0].numel}, {"tokens", tokens}, {"rows", nlohmann::json::array()}};
  int mismatches = 0;
  for (const Row& r : rows) {
    const auto p = static_cast<int64_t>(r.stats.live_of(MemoryTag::Params));
    const auto g = static_cast<int64_t>(r.stats.peak_of(MemoryTag::Grads));
    const auto o = static_cast<int64_t>(r.stats.live_of(MemoryTag::Optimizer));
    const bool ok = p == r.formula.params && g == r.formula.grads && o == r.formula.optimizer &&
                    static_cast<int64_t>(r.stats.peak_of(MemoryTag::Params)) == r.formula.params;
    mismatches += !ok;
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} | {:.3f} ({:.3f}) | {:.3f} | {:.3f} GiB |\n", r.stage, r.dp,
               gib(p), gib(g), gib(o), gib(p + g + o), gib(r.formula.total()), ok ? "yes" : "NO",
               gib(r.stats.peak_of(MemoryTag::Comm)), gib(r.comm_bound), gib(r.stats.peak_of(MemoryTag::Activations)),
               gib(r.bytes_sent));
    out["rows"].push_back({{"stage", r.stage}, {"dp", r.dp}, {"shard", r.shard}, {"params", p}, {"grads_peak", g},
                           {"optimizer", o}, {"formula_total", r.formula.total()},
                           {"comm_peak", r.stats.peak_of(MemoryTag::Comm)}, {"comm_bound", r.comm_bound},
                           {"activations_peak", r.stats.peak_of(MemoryTag::Activations)},
                           {"bytes_sent", r.bytes_sent}, {"matches_formula", ok}});
  }
  if (!svg_path.empty()) {
    io::ChartSpec chart;
    chart.title = "ZeRO: params + grads + optimizer per rank, GPT-2 124M (fp32, Adam)";
    chart.x_label = "data-parallel ranks (dp)";
    chart.y_label = "GiB per rank";
    const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
    for (int stage = 0; stage <= 3; ++stage) {
      io::Series s{fmt::format("stage {}", stage), colors[stage], {}, {}, true};
      for (const Row& r : rows) {
        if (r.stage != stage) continue;
        s.x.push_back(r.dp);
        s.y.push_back(gib(static_cast<double>(r.stats.live_of(MemoryTag::Params) + r.stats.peak_of(MemoryTag::Grads) +
                                              r.stats.live_of(MemoryTag::Optimizer))));
      }
      chart.series.push_back(s);
    }
    write_file_atomically(svg_path, io::render_chart_svg(chart));
  }
  if (!json_path.empty()) write_file_atomically(json_path, out.dump(2) + "\n");
  fmt::print("\n{}\n", out.dump());
  return mismatches == 0 ? 0 : 1;
}
