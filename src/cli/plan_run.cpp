#include "cli/plan_run.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/check.h"
#include "data/dataset.h"
#include "exec/program.h"
#include "exec/recompute.h"

namespace tessera::cli {

namespace {

plan::Recompute recompute_of(const train::RunConfig& c) {
  const std::string& r = c.memory.recompute;
  if (r == "none") return plan::Recompute::None;
  if (r == "selective") return plan::Recompute::Selective;
  if (r == "full") return plan::Recompute::Full;
  if (r == "every_k") return plan::Recompute::EveryK;
  if (r == "optimal") return plan::Recompute::Optimal;
  TS_FAIL("plan --config: memory.recompute = \"{}\" is not one the cost model describes (none, selective, full, "
          "every_k, optimal)", r);
}

// The stages `tessera train` cuts the model into without parallel.stage_layers (the FLOP model's
// balance, parallel::TrainingEngine::split_stages) when they are not the cost model's even split:
// a note saying so, else empty.
std::string uneven_split_note(const train::RunConfig& c) {
  const int stages = c.parallel.pp * c.parallel.virtual_stages;
  if (stages == 1 || c.model.n_layer % stages != 0) return {};
  const exec::UnitTimes nominal = exec::nominal_unit_times(c.model, c.train.micro_batch_size, c.model.seq_len);
  std::vector<double> costs(nominal.forward.size());
  for (size_t u = 0; u < costs.size(); ++u) costs[u] = nominal.forward[u] + nominal.backward[u];
  const exec::StagePlan run = exec::balanced_stages(costs, stages);
  const std::vector<int64_t> even(static_cast<size_t>(stages), c.model.n_layer / stages);
  const exec::StagePlan planned = exec::stages_of_blocks(c.model.n_layer + 2, even);
  if (exec::describe_stages(run) == exec::describe_stages(planned)) return {};
  return fmt::format("the run balances its stages by the FLOP model as {}, while the cost model takes {} blocks per "
                     "stage ({}), so the stages' memory and time are those of the even split; give "
                     "parallel.stage_layers with {} each to train the split planned here",
                     exec::describe_stages(run), c.model.n_layer / stages, exec::describe_stages(planned),
                     c.model.n_layer / stages);
}

}  // namespace

PlannedRun planned_run(train::RunConfig c) {
  if (c.vocab_from_data) {
    const std::filesystem::path info = std::filesystem::path(c.data.dir) / "data.json";
    std::error_code ec;
    TS_CHECK(std::filesystem::is_regular_file(info, ec),
             "plan --config: model.vocab_size is not set, and '{}' does not exist to take it from as the trainer "
             "would; prepare the data (tessera data prepare --out {}), point --data.dir at it, or set "
             "--model.vocab_size", info.string(), c.data.dir);
    c.model.vocab_size = static_cast<int>(data::read_dataset_info(c.data.dir).vocab_size);
  }
  c.validate();
  PlannedRun run;
  run.model = c.model;
  plan::Layout& l = run.layout;
  static_cast<config::ParallelLayout&>(l) = c.layout();
  l.recompute = recompute_of(c);
  l.recompute_every = c.memory.recompute == "every_k" ? c.memory.recompute_every : 0;
  l.activation_budget_mb = c.memory.recompute == "optimal" ? c.memory.activation_budget_mb : 0.0;
  // bf16 and fp16 hold the same bytes; the cost model's 16-bit format is bf16.
  l.precision = c.precision.compute == "fp32" ? plan::Precision::Fp32 : plan::Precision::Bf16;
  // The engine's attention is tiled: it never stores the T x T scores and runs as one fused kernel.
  l.flash_attention = true;
  l.activations = plan::ActivationAccounting::Engine;
  l.states = plan::StateAccounting::Engine;
  l.bucket_mb = static_cast<double>(c.parallel.bucket_mb);
  // Buckets are reduced as backward completes them, but on the communicator's progress thread,
  // which shares the rank's cores with the compute it would hide behind: not overlapped.
  l.overlap = false;
  l.optimizer = c.optim.name;
  l.compression = c.parallel.compression;
  const config::CompressionOptions compression = c.compression_options();
  l.compression_ratio = compression.ratio;
  l.compression_rank = compression.rank;
  run.split_note = c.parallel.stage_layers.empty() ? uneven_split_note(c) : std::string();
  TS_CHECK(c.parallel.stage_layers.empty() || std::all_of(c.parallel.stage_layers.begin(), c.parallel.stage_layers.end(),
                                                          [&](int64_t b) { return b == c.parallel.stage_layers.front(); }),
           "plan --config: parallel.stage_layers sets uneven pipeline stages, which the cost model does not describe "
           "(it takes model.n_layer / (parallel.pp × parallel.virtual_stages) blocks per stage); give as many blocks "
           "to every stage");
  return run;
}

}  // namespace tessera::cli
