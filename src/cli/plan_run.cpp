#include "cli/plan_run.h"

#include <filesystem>

#include "core/check.h"
#include "data/dataset.h"

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
  TS_CHECK(c.parallel.stage_layers.empty(),
           "plan --config: parallel.stage_layers sets uneven pipeline stages, which the cost model does not describe "
           "(it takes model.n_layer / parallel.pp layers per stage); leave it out to plan the balanced split");
  return run;
}

}  // namespace tessera::cli
