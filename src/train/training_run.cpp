// The model and its engine on this rank, restored and announced (train/training_run.h).
#include "train/training_run.h"

#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <filesystem>

#include "core/atomic_file.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/matmul.h"
#include "optim/make_optimizer.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

// The nvme tier's folder of this rank, where the run offloads anything.
std::optional<OffloadFolder> offload_folder(const RunConfig& cfg, dist::Communicator* world) {
  if (!cfg.memory.offloads()) return std::nullopt;
  return std::optional<OffloadFolder>(std::in_place, cfg.memory.offload_dir, cfg.train.out_dir,
                                      world ? world->rank() : 0);
}

// Points the engine's nvme tier at this rank's folder. Planning offload and recomputation together
// weighs recomputation against the disk's time: the disk is measured then, and returned.
std::optional<memory::DiskBandwidth> plan_offload(parallel::EngineOptions& settings,
                                                  const std::optional<OffloadFolder>& offload) {
  if (!offload) return std::nullopt;
  settings.offload_dir = offload->scratch();
  if (settings.recompute.offload != exec::ActivationOffloadMode::Auto) return std::nullopt;
  const memory::DiskBandwidth disk = memory::measure_disk_bandwidth(offload->scratch(), size_t{64} << 20, 2);
  settings.recompute.disk_write_bytes_per_second = disk.write_bytes_per_second;
  settings.recompute.disk_read_bytes_per_second = disk.read_bytes_per_second;
  return disk;
}

// "; reduced by powersgd (rank 2) after 2 exact steps", or nothing without compression.
std::string describe_compression(const config::CompressionOptions& o) {
  std::string text;
  switch (o.method) {
    case config::CompressionMethod::None: return text;
    case config::CompressionMethod::TopK: text = fmt::format("topk ({:g} of each bucket)", o.ratio); break;
    case config::CompressionMethod::Qsgd: text = fmt::format("qsgd ({} levels)", o.levels); break;
    case config::CompressionMethod::OneBit: text = "onebit"; break;
    case config::CompressionMethod::PowerSgd: text = fmt::format("powersgd (rank {})", o.rank); break;
  }
  text = "; reduced by " + text;
  if (o.warmup_steps > 0) text += fmt::format(" after {} exact steps", o.warmup_steps);
  return text;
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

// How each stage's Checkmate schedule came about: the solver's status and time, or the cache it came
// from, or the fallback to optimal; empty for the other policies.
std::string describe_checkmate(const exec::StagePlan& stages) {
  std::string text;
  for (size_t s = 0; s < stages.stages.size(); ++s) {
    const std::optional<memory::remat::ChainCheckmate>& c = stages.stages[s].checkmate;
    if (!c) continue;
    text += text.empty() ? "; Checkmate (CBC)" : ",";
    if (stages.stages.size() > 1) text += fmt::format(" stage {}", s);
    switch (c->source) {
      case memory::remat::ChainPlanSource::Solved:
        text += fmt::format(" {} in {:.2f} s", memory::remat::solve_status_name(c->status), c->solve_seconds);
        break;
      case memory::remat::ChainPlanSource::Cached:
        text += fmt::format(" {}, read from the cache", memory::remat::solve_status_name(c->status));
        break;
      case memory::remat::ChainPlanSource::Fallback:
        text += fmt::format(" found no schedule the chain runs in {:.1f} s ({}): fell back to optimal", c->solve_seconds,
                            memory::remat::solve_status_name(c->status));
        break;
    }
    if (!c->cache_note.empty()) text += fmt::format(" (cache not used: {})", c->cache_note);
  }
  return text;
}

// Where the memory tiers hold what: the activations, the optimizer state, the parameters.
std::string describe_tiers(const RunConfig& cfg, const parallel::TrainingEngine& engine) {
  int offloaded = 0;
  for (const exec::Action& a : engine.program().actions) offloaded += a.offload;
  const size_t chunks = engine.optimizer_state_chunks();
  const bool params = cfg.memory.offload_params == "nvme";
  return fmt::format("\nmemory tiers ({}): the activations {}; the optimizer state {}; {}",
                     cfg.memory.offload_dir.empty() ? cfg.train.out_dir + "/offload" : cfg.memory.offload_dir,
                     offloaded > 0 ? fmt::format("of {} unit forwards per step wait for their backward in the nvme "
                                                 "tier", offloaded)
                                   : std::string("in compute memory"),
                     chunks > 0 ? fmt::format("in the nvme tier, streamed through compute memory in {} chunk{} of "
                                              "about {:g} MiB", chunks, chunks == 1 ? "" : "s",
                                              cfg.memory.offload_chunk_mb)
                                : std::string("in compute memory"),
                     !params ? std::string("parameters and gradients in compute memory")
                     : fmt::format("ZeRO-3's parameter shard in the nvme tier, each unit's parameters read into "
                                   "compute memory before it runs (the next unit's while it runs) and the master "
                                   "values with the optimizer state's chunks; its gradient shard in the nvme "
                                   "tier, each bucket written as its reduction completes and read with the "
                                   "optimizer state's chunks"));
}

// One line on how the step runs: the schedule, the recompute policy and what it costs.
std::string describe_plan(const RunConfig& cfg, const parallel::TrainingEngine& engine) {
  int recomputed = 0, selective = 0;
  for (const exec::Action& a : engine.program().actions) {
    recomputed += a.phase == exec::Phase::Recompute;
    selective += a.selective;
  }
  std::string text = fmt::format("execution: schedule {}{} ({} microbatches per step), recompute {}",
                                 config::schedule_name(cfg.parallel.schedule),
                                 cfg.parallel.schedule == config::ScheduleKind::PipeDream2BW ? fmt::format(" with weight_version {}",
                                                                              cfg.parallel.weight_version)
                                                                : std::string(),
                                 cfg.accumulation_steps(), config::recompute_policy_name(cfg.memory.recompute));
  using config::RecomputePolicy;
  if (cfg.memory.recompute == RecomputePolicy::EveryK) {
    // The default is each stage's own: ceil(sqrt(its blocks)).
    std::vector<int> segments;
    for (const exec::StagePlan::Stage& stage : engine.stages().stages) {
      segments.push_back(cfg.memory.recompute_every > 0 ? cfg.memory.recompute_every
                                                        : config::default_every_k(stage.blocks(cfg.model.n_layer)));
    }
    const bool uniform = std::all_of(segments.begin(), segments.end(), [&](int k) { return k == segments.front(); });
    if (uniform) segments.resize(1);
    text += fmt::format(" (segments of {} blocks{})", fmt::join(segments, ", "), uniform ? "" : " by stage");
  }
  if (config::recompute_takes_budget(cfg.memory.recompute)) {
    text += fmt::format(" (budget {})", mib(cfg.memory.activation_budget_mb * 1048576.0));
  }
  text += describe_checkmate(engine.stages());
  text += fmt::format(": {} unit forwards recomputed per step", recomputed);
  // Checkmate chooses block by block what selective recomputation applies to all.
  if (selective > 0 && cfg.memory.recompute != RecomputePolicy::Selective) {
    text += fmt::format(", {} keeping all but the norm outputs and MLP activation, which their backward rebuilds",
                        selective);
  }
  if (cfg.parallel.pp > 1) {
    text += fmt::format("\npipeline: pp {} × {} chunk{} per rank; stages (stage s on rank s mod pp): {}{}", cfg.parallel.pp,
                        cfg.parallel.virtual_stages, cfg.parallel.virtual_stages == 1 ? "" : "s",
                        exec::describe_stages(engine.stages()),
                        cfg.parallel.stage_layers.empty() ? " (balanced by the FLOP model)" : " (parallel.stage_layers)");
  }
  text += fmt::format("; predicted activation peak {}{}", mib(static_cast<double>(engine.predicted_activation_peak())),
                      cfg.parallel.pp > 1 ? " on this rank" : "");
  if (const exec::ActivationEncoder* encoder = engine.activation_encoder()) {
    text += fmt::format(" with the kept activations encoded ({})", exec::describe(encoder->encoding()));
  }
  if (cfg.memory.offloads()) text += describe_tiers(cfg, engine);
  return text;
}

}  // namespace

TrainingRun::TrainingRun(RunStart& run_start, StopSignals* stop_signals)
    : start(run_start),
      cfg(run_start.cfg),
      world(run_start.world),
      stop(stop_signals),
      result(run_start.result),
      leader(run_start.leader),
      rank(run_start.rank),
      ranks(run_start.ranks),
      world_size(run_start.world_size),
      T(run_start.T),
      micro(run_start.micro),
      accumulation(run_start.accumulation),
      dataset(run_start.dataset),
      loader(run_start.loader),
      tensor_plan(cfg.model, cfg.parallel.tp, start.mesh ? start.mesh->tp().rank() : 0),
      expert_plan(cfg.model, cfg.parallel.ep, start.mesh && cfg.parallel.ep > 1 ? start.mesh->ep().rank() : 0,
                  &tensor_plan),
      // With ZeRO-3's shard in the nvme tier the whole values are never made: each parameter's
      // initial values go there as the shard is written, so a model larger than RAM starts.
      model(cfg.model, memory, cfg.train.seed, &expert_plan, cfg.memory.offload_params == "nvme"),
      float_gemm(choose_float_gemm(cfg.precision.f32_gemm, model_gemm_problems(model, int64_t{micro} * T), world)),
      offload(offload_folder(cfg, world)),
      engine_settings(engine_options(cfg)),
      disk(plan_offload(engine_settings, offload)),
      engine(model, memory, start.mesh ? &*start.mesh : nullptr, engine_settings),
      schedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps},
      tokenizer_path((fs::path(cfg.data.dir) / "tokenizer.model").string()),
      N(cfg.model.parameter_count()),
      active(cfg.model.active_parameter_count()),
      flops_per_token(6.0 * static_cast<double>(active) +
                      12.0 * cfg.model.n_layer * cfg.model.n_embd * static_cast<double>(T)),
      tokens_per_step(static_cast<int64_t>(cfg.train.batch_size) * T),
      windows(static_cast<double>(loader.windows_per_epoch())),
      planned_epochs(static_cast<double>(cfg.train.steps) * cfg.train.batch_size / windows) {}

void TrainingRun::restore() {
  if (start.resume_path.empty() && !cfg.train.init_from.empty()) init_from_weights();
  if (!start.resume_path.empty()) resume_checkpoint();
  result.first_step = step;
}

// Weights only: the step, optimizer state, data position and seed stay this run's own.
void TrainingRun::init_from_weights() {
  const LoadedWeights init = load_run_weights(cfg.train.init_from, cfg, model, engine);
  if (!leader) return;
  if (!init.note.empty()) fmt::print("{}\n", init.note);
  fmt::print("initialized from the weights of {}: a new run from step 0\n", init.path);
  if (!init.tokenizer_path.empty() && file_checksum(init.tokenizer_path) != file_checksum(tokenizer_path)) {
    fmt::print("warning: {}'s tokenizer differs from this data's ({}): the same ids may mean other text\n",
               init.path, tokenizer_path);
  }
}

void TrainingRun::resume_checkpoint() {
  const std::string& resume_path = start.resume_path;
  const RunConfig& saved_config = *start.saved_config;
  LoadedCheckpoint loaded = load_run_checkpoint(resume_path, cfg, model, engine, world);
  std::vector<std::string> streamed;
  if (loaded.parameters_one_at_a_time) streamed.push_back("the parameters one at a time");
  if (loaded.optimizer_chunk_by_chunk) streamed.push_back("the optimizer state chunk by chunk");
  if (!streamed.empty()) {
    streamed_load_note = fmt::format(" (loaded into the nvme tier: {})", fmt::join(streamed, ", "));
  }
  step = loaded.state.step;
  engine.restore_weight_versions(step);
  if (engine.loss_scaler().enabled()) {
    if (loaded.state.loss_scale) {
      engine.loss_scaler().restore(*loaded.state.loss_scale);
    } else if (leader) {
      fmt::print("note: {} holds no loss scale (it was not saved by an fp16 run): the scale starts at {:g}\n",
                 resume_path, engine.loss_scaler().scale());
    }
  }
  // The schedule where it was: a restart saved by an earlier change of length, or a new one
  // from this step where this resume changes the length past warmup.
  optim::WarmupCosine before{saved_config.optim.lr, saved_config.optim.min_lr, saved_config.optim.warmup_steps,
                             saved_config.train.steps};
  if (loaded.state.lr_restart) {
    before.restart_step = loaded.state.lr_restart->step;
    before.restart_rate = static_cast<float>(loaded.state.lr_restart->rate);
  }
  if (saved_config.train.steps != cfg.train.steps && step >= before.warmup_steps) {
    schedule.restart_step = step;
    schedule.restart_rate = before.at(step);
  } else {
    schedule.restart_step = before.restart_step;
    schedule.restart_rate = before.restart_rate;
  }
  val_history = loaded.state.val_history;
  checkpoint_elapsed = loaded.state.elapsed_seconds;
  loader.restore(data::loader_state_from_json(loaded.state.data_position));
  TS_CHECK(loaded.state.seed == cfg.train.seed,
           "checkpoint '{}' was trained with train.seed = {} but this run has {}; resume with the same seed",
           resume_path, loaded.state.seed, cfg.train.seed);
  if (leader && !loaded.unused.empty()) fmt::print("note: resuming from {} without {}\n", resume_path, loaded.unused);
  if (leader) truncate_history(result.metrics_path, step);
}

void TrainingRun::announce() {
  if (leader) {
    metrics.emplace(result.metrics_path, step > 0);
    if (step > 0) history = reload_history(result.metrics_path, step);
    result.unigram_entropy = unigram_entropy(*dataset.train, dataset.info.vocab_size);
  }
  // Elapsed time continues across resumes: the earlier processes' time, as the checkpoint recorded
  // it (the log's last line may be a few steps older), or from the log for checkpoints of format 1.
  elapsed_before = checkpoint_elapsed > 0 ? checkpoint_elapsed : history.elapsed_seconds;
  // The MFU reference: fixed per machine (peak_flops.h), not re-measured under today's load.
  peak = leader ? matmul_peak(cfg.log.peak_gflops, omp_get_max_threads()) : MatmulPeak{};
  if (!leader) return;
  print_model_and_data();
  print_layout();
  print_execution();
}

void TrainingRun::print_model_and_data() {
  if (!start.start_note.empty()) fmt::print("{}\n", start.start_note);
  if (step > 0) fmt::print("resumed from {} at step {}{}\n", start.resume_path, step, streamed_load_note);
  if (!start.changes_note.empty()) fmt::print("{}\n", start.changes_note);
  if (schedule.restart_step >= 0 && schedule.restart_step == step) {
    fmt::print("train.steps is {} (the checkpoint's run had {}): the learning rate continues its decay from {:.3g} "
               "at step {} to optim.min_lr = {:g} at step {}\n",
               cfg.train.steps, start.saved_config->train.steps, schedule.restart_rate, step, cfg.optim.min_lr,
               cfg.train.steps);
  }
  const std::string kv_heads = cfg.model.kv_heads() != cfg.model.n_head
                                   ? fmt::format(" sharing {} key/value heads", cfg.model.kv_heads())
                                   : "";
  fmt::print("model: {} parameters ({} layers, {} heads{}, {} channels, vocab {}, context {})\n", N,
             cfg.model.n_layer, cfg.model.n_head, kv_heads, cfg.model.n_embd, cfg.model.vocab_size, T);
  if (cfg.model.moe_experts > 0) {
    const int64_t capacity = cfg.model.moe_capacity(int64_t{micro} * T);
    fmt::print("mixture of experts: {} of {} blocks route each token to its top-{} of {} experts (capacity {} rows "
               "per expert and microbatch of {} tokens); {} parameters active per token; aux loss x{:g}, z-loss "
               "x{:g}\n",
               cfg.model.moe_layers(), cfg.model.n_layer, cfg.model.moe_top_k, cfg.model.moe_experts, capacity,
               int64_t{micro} * T, cfg.model.active_parameter_count(), cfg.model.moe_aux_loss_coef,
               cfg.model.moe_z_loss_coef);
  }
  fmt::print("data: {} training tokens, {} validation tokens; {} tokens per step (dp {} × {} microbatches of {} × {}); "
             "{} steps read the training tokens {:.3g} times (epochs)\n",
             dataset.train->size(), dataset.val->size(), tokens_per_step, cfg.parallel.dp, accumulation, micro, T,
             cfg.train.steps, planned_epochs);
  for (const std::string& warning : data_size_warnings(cfg, dataset.train->size(), planned_epochs)) {
    fmt::print("warning: {}\n", warning);
  }
}

void TrainingRun::print_layout() {
  if (world_size > 1) {
    fmt::print("mesh: {} processes = dp {} × pp {} × tp {} (tp the fastest-varying rank, then dp, then pp){}\n",
               world_size, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp,
               cfg.dp_from_world ? "; parallel.dp left out, so dp = processes / (tp × pp)" : "");
  }
  if (ranks > 1) {
    const size_t buckets = engine.data_parallel().buckets().size();
    fmt::print("parallel: dp {} with ZeRO stage {}; {} gradient bucket{} of up to {} MiB{}\n", ranks,
               cfg.parallel.zero_stage, buckets, buckets == 1 ? "" : "s", cfg.parallel.bucket_mb,
               cfg.optim.kind == optim::OptimizerKind::OneBitAdam
                   ? fmt::format("; reduced for the first {} steps, then 1-bit Adam exchanges its momentum in one "
                                 "bit per element", cfg.optim.freeze_step)
                   : describe_compression(cfg.compression_options()));
  }
  if (cfg.parallel.tp > 1) {
    fmt::print("{}{}\n", tensor_plan.describe(),
               cfg.parallel.sp ? fmt::format("; sequence parallel: norms, dropout and residuals on {} of the {} "
                                             "positions per rank (all-gather in, reduce-scatter out)",
                                             T / cfg.parallel.tp, T)
                               : std::string());
  }
  if (cfg.parallel.ep > 1) {
    fmt::print("{}; expert gradients reduced over {} rank{} (edp), the dense ones over dp {}\n", expert_plan.describe(),
               cfg.parallel.dp / cfg.parallel.ep, cfg.parallel.dp / cfg.parallel.ep == 1 ? "" : "s", cfg.parallel.dp);
  }
}

void TrainingRun::print_execution() {
  fmt::print("{}\n", describe_plan(cfg, engine));
  if (const config::PrecisionOptions precision = cfg.precision_options(); precision.mixed() || precision.grad_dtype != DType::F32) {
    fmt::print("precision: {}; 16-bit matmuls by {}\n", precision.describe(),
               precision.mixed() ? kernels::half_gemm_description() : std::string("none"));
  }
  fmt::print("gemm: {}\n", kernels::gemm_libraries(cfg.precision_options().mixed() ? kernels::half_gemm_description()
                                                                               : std::string()));
  fmt::print("f32 matmuls by {}: {}\n", kernels::float_gemm_name(float_gemm.chosen), float_gemm.reason);
  if (const auto warning =
          kernels::generic_openblas_core_warning(kernels::openblas_core(), kernels::detect_cpu_vector_features())) {
    fmt::print("{}\n", *warning);
  }
  const std::string delayed =
      cfg.optim.delayed_update_after > 0
          ? fmt::format("; from step {} each update runs while the next step computes on {} (delayed by one step, "
                        "{} copies of the owned values and gradients beside it)",
                        cfg.optim.delayed_update_after + 1,
                        cfg.optim.delayed_update_extrapolate ? "the weights extrapolated by the last update's change"
                                                             : "the weights before it",
                        cfg.optim.delayed_update_extrapolate ? 3 : 2)
          : std::string();
  fmt::print("optimizer: {}, {} of state on this process{}\n", engine.optimizer().name(),
             mib(static_cast<double>(optim::state_bytes(cfg.optim, engine.ownership().master_segments()))), delayed);
  fmt::print("{}\n", start.run_memory.start_line);
  fmt::print("matmul peak {:.1f} GFLOP/s per process ({}), the MFU reference; {:.4g} MFLOP per token; unigram "
             "baseline {:.3f} nats\n",
             peak.flops / 1e9, peak.source, flops_per_token / 1e6, result.unigram_entropy);
  if (cfg.optim.warmup_steps > cfg.train.steps) {
    fmt::print("warning: optim.warmup_steps = {} is more than train.steps = {}: the learning rate never reaches "
               "optim.lr = {}\n", cfg.optim.warmup_steps, cfg.train.steps, cfg.optim.lr);
  }
  if (disk) {
    fmt::print("offloading planned with recomputation under the budget, at the offload folder's disk: {:.2f} GB/s "
               "written, {:.2f} GB/s read{}\n",
               disk->write_bytes_per_second / 1e9, disk->read_bytes_per_second / 1e9,
               disk->direct ? "" : " (buffered)");
  }
  fmt::print("run folder: {}\n", cfg.train.out_dir);
}

}  // namespace tessera::train
