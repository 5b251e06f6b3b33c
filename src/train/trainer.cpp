#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "data/dataset.h"
#include "dist/mesh.h"
#include "data/loader.h"
#include "io/loss_chart.h"
#include "io/metrics.h"
#include "nn/gpt.h"
#include "optim/lr_schedule.h"
#include "parallel/training_engine.h"
#include "parallel/rank_sum.h"
#include "train/checkpoint.h"
#include "train/matmul_ceiling.h"
#include "train/progress.h"
#include "train/sampler.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;

// Entropy (nats) of the token distribution of the training data: the loss of a model that knows
// only how often each token occurs. A model that learned anything beats it.
double unigram_entropy(const data::TokenFile& file, int64_t vocab) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  std::vector<int32_t> chunk(1 << 16);
  for (int64_t begin = 0; begin < file.size(); begin += static_cast<int64_t>(chunk.size())) {
    const auto n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(chunk.size()), file.size() - begin));
    file.read(begin, std::span<int32_t>(chunk.data(), n));
    for (size_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(chunk[i])];
  }
  double h = 0;
  const auto total = static_cast<double>(file.size());
  for (int64_t c : counts) {
    if (c > 0) h -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / total);
  }
  return h;
}

// Rebuilds the loss history of the steps before `upto` from an existing metrics file, so a
// resumed run's chart continues the earlier one.
void reload_history(const std::string& path, int64_t upto, io::Series& train, io::Series& val) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || j["step"].get<int64_t>() > upto) continue;
    const std::string kind = j.value("kind", "");
    if (kind == "train") {
      train.x.push_back(j["step"].get<double>());
      train.y.push_back(j["loss"].get<double>());
    } else if (kind == "val") {
      val.x.push_back(j["step"].get<double>());
      val.y.push_back(j["loss"].get<double>());
    }
  }
}

// Metrics lines of steps after the checkpoint being resumed (a run that went on past its last
// checkpoint) are dropped, so the log tells one consistent history.
void truncate_history(const std::string& path, int64_t upto) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() > upto) continue;
    kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

// The data-parallel group: the world itself for now (pp = tp = ep = 1). Checks the layout first,
// so a wrong world size fails on every rank with the factors named.
std::optional<dist::Mesh> make_mesh(const RunConfig& cfg, dist::Communicator* world) {
  const config::ParallelLayout layout = cfg.layout();
  const int world_size = world == nullptr ? 1 : world->size();
  try {
    layout.validate_world(world_size);
  } catch (const Error& e) {
    TS_FAIL("{}. tessera train runs one process per data-parallel rank: start it with `tessera launch -n {} -- train "
            "...` (or mpirun -n {}), or set parallel.dp = {}",
            e.what(), layout.world_size(), layout.world_size(), world_size);
  }
  if (world == nullptr) return std::nullopt;
  return std::optional<dist::Mesh>(std::in_place, *world, layout);
}

parallel::EngineOptions engine_options(const RunConfig& cfg) {
  parallel::EngineOptions o;
  o.layout = cfg.layout();
  o.bucket_bytes = static_cast<int64_t>(static_cast<double>(cfg.parallel.bucket_mb) * 1048576.0);
  o.adam = {cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  o.seq_len = cfg.model.seq_len;
  o.recompute.policy = memory::parse_recompute_policy(cfg.memory.recompute);
  o.recompute.every_k = cfg.memory.recompute_every;
  o.recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(cfg.memory.activation_budget_mb) * 1048576.0);
  return o;
}

ModelState model_state(nn::GPT& model, parallel::TrainingEngine& engine, nn::ParameterAccess& values) {
  return {model.parameters(), values, &engine.optimizer(), engine.data_parallel().owned()};
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

// One line on how the step runs: the schedule, the recompute policy and what it costs.
std::string describe_plan(const RunConfig& cfg, const parallel::TrainingEngine& engine) {
  int recomputed = 0;
  for (const exec::Action& a : engine.program().actions) recomputed += a.phase == exec::Phase::Recompute;
  std::string text = fmt::format("execution: schedule {} ({} microbatches per step), recompute {}", cfg.parallel.schedule,
                                 cfg.accumulation_steps(), cfg.memory.recompute);
  if (cfg.memory.recompute == "every_k") {
    text += fmt::format(" (segments of {} blocks)", cfg.memory.recompute_every > 0
                                                        ? cfg.memory.recompute_every
                                                        : exec::default_every_k(cfg.model.n_layer));
  }
  if (cfg.memory.recompute == "optimal") text += fmt::format(" (budget {})", mib(cfg.memory.activation_budget_mb * 1048576.0));
  text += fmt::format(": {} unit forwards recomputed per step", recomputed);
  if (const auto predicted = engine.predicted_activations()) {
    text += fmt::format("; predicted activation peak {}", mib(static_cast<double>(predicted->peak)));
  }
  return text;
}

nlohmann::json memory_json(const MemoryStats& stats) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t t = 0; t < kMemoryTagCount; ++t) {
    j[std::string(memory_tag_name(static_cast<MemoryTag>(t)))] = stats.peak[t];
  }
  j["total"] = stats.peak_total;
  return j;
}

}  // namespace

Trainer::Trainer(RunConfig config, dist::Communicator* world) : config_(std::move(config)), world_(world) {}

TrainResult Trainer::run() {
  RunConfig& cfg = config_;
  TrainResult result;
  std::optional<dist::Mesh> mesh = make_mesh(cfg, world_);
  dist::Communicator* dp_comm = mesh ? &mesh->dp() : nullptr;
  const int rank = dp_comm ? dp_comm->rank() : 0, ranks = dp_comm ? dp_comm->size() : 1;
  // Rank 0 alone prints and writes the run folder; every rank computes.
  const bool leader = rank == 0;

  // Data first: a bad dataset fails before any memory is spent on the model.
  data::Dataset dataset = data::open_dataset(cfg.data.dir);
  if (cfg.vocab_from_data) {
    cfg.model.vocab_size = static_cast<int>(dataset.info.vocab_size);
  } else {
    data::check_model_vocab(cfg.model.vocab_size, dataset.info.vocab_size, cfg.data.dir);
  }
  cfg.validate();
  const int T = cfg.model.seq_len;
  const int micro = cfg.train.micro_batch_size;
  const int accumulation = cfg.accumulation_steps();
  data::TokenLoader loader(dataset.train, {T, cfg.train.batch_size, cfg.train.seed, true});
  data::TokenLoader val_loader(dataset.val, {T, micro, 0, false});

  result.run_dir = cfg.train.out_dir;
  result.metrics_path = (fs::path(cfg.train.out_dir) / "metrics.jsonl").string();
  result.chart_path = (fs::path(cfg.train.out_dir) / "loss.svg").string();
  if (leader) {
    fs::create_directories(cfg.train.out_dir);
    write_file_atomically((fs::path(cfg.train.out_dir) / "config.toml").string(), to_toml(cfg));
  }

  MemoryAccountant memory;
  nn::GPT model(cfg.model, memory, cfg.train.seed);
  parallel::TrainingEngine engine(model, memory, dp_comm, engine_options(cfg));
  const optim::WarmupCosine schedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  CheckpointStore checkpoints((fs::path(cfg.train.out_dir) / "checkpoints").string(), cfg.checkpoint.keep);
  const std::string tokenizer_path = (fs::path(cfg.data.dir) / "tokenizer.model").string();

  int64_t step = 0;
  std::vector<double> val_history;
  if (!cfg.checkpoint.resume.empty()) {
    std::string note;
    const std::string path = resolve_checkpoint(cfg.checkpoint.resume, checkpoints.dir(), &note);
    if (leader && !note.empty()) fmt::print("{}\n", note);
    parallel::DataParallel::FullParameters full = engine.full_parameters();
    LoadedCheckpoint loaded = load_checkpoint(path, cfg, model_state(model, engine, full), dp_comm);
    full.write_back();
    step = loaded.state.step;
    loader.restore(data::loader_state_from_json(loaded.state.data_position));
    TS_CHECK(loaded.state.seed == cfg.train.seed,
             "checkpoint '{}' was trained with train.seed = {} but this run has {}; resume with the same seed",
             path, loaded.state.seed, cfg.train.seed);
    TS_CHECK(step < cfg.train.steps, "checkpoint '{}' is at step {}, which is not before train.steps = {}: nothing to do; "
             "raise train.steps to train further", path, step, cfg.train.steps);
    if (leader) {
      truncate_history(result.metrics_path, step);
      fmt::print("resumed from {} at step {}\n", path, step);
    }
  }
  result.first_step = step;

  std::optional<io::MetricsLog> metrics;
  if (leader) metrics.emplace(result.metrics_path, step > 0);
  io::Series train_series{"train loss", "#1f77b4", {}, {}, false};
  io::Series val_series{"val loss", "#d62728", {}, {}, true};
  if (leader && step > 0) reload_history(result.metrics_path, step, train_series, val_series);
  if (leader) result.unigram_entropy = unigram_entropy(*dataset.train, dataset.info.vocab_size);

  const int64_t N = model.parameters().numel();
  const double flops_per_token = 6.0 * static_cast<double>(N) +
                                 12.0 * cfg.model.n_layer * cfg.model.n_embd * static_cast<double>(T);
  // The ceiling of one rank's cores: MFU is reported per rank, as the ranks share the step's tokens.
  const double ceiling = measure_matmul_ceiling(0.25);
  const int64_t tokens_per_step = static_cast<int64_t>(cfg.train.batch_size) * T;
  if (leader) {
    fmt::print("model: {} parameters ({} layers, {} heads, {} channels, vocab {}, context {})\n", N, cfg.model.n_layer,
               cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size, T);
    fmt::print("data: {} training tokens, {} validation tokens; {} tokens per step (dp {} × {} microbatches of {} × {})\n",
               dataset.train->size(), dataset.val->size(), tokens_per_step, cfg.parallel.dp, accumulation, micro, T);
    if (ranks > 1) {
      fmt::print("parallel: dp {} with ZeRO stage {}; {} gradient buckets of up to {} MiB\n", ranks,
                 cfg.parallel.zero_stage, engine.data_parallel().buckets().size(), cfg.parallel.bucket_mb);
    }
    fmt::print("{}\n", describe_plan(cfg, engine));
    fmt::print("measured matmul ceiling {:.1f} GFLOP/s; {:.1f} MFLOP per token; unigram baseline {:.3f} nats\n",
               ceiling / 1e9, flops_per_token / 1e6, result.unigram_entropy);
    fmt::print("run folder: {}\n", cfg.train.out_dir);
  }

  auto draw_chart = [&]() {
    if (!leader) return;
    io::ChartSpec chart;
    chart.title = fmt::format("tessera: {} ({} parameters)", cfg.train.out_dir, N);
    chart.series = {train_series, val_series};
    chart.reference_y = result.unigram_entropy;
    chart.reference_label = "unigram baseline";
    write_file_atomically(result.chart_path, io::render_chart_svg(chart));
  };
  // Every rank evaluates the same batches (ZeRO-3 needs every rank in each gather), so the ranks
  // agree on the value without communicating it.
  auto evaluate = [&]() {
    double sum = 0;
    int64_t count = 0;
    data::TokenLoader val = val_loader;
    const int batches = static_cast<int>(std::min<int64_t>(cfg.train.eval_batches, std::max<int64_t>(1, val.windows_per_epoch() / micro)));
    for (int b = 0; b < batches; ++b) {
      data::Batch batch = val.next();
      const exec::MicrobatchInput input{{nn::token_tensor(batch.inputs.data(), static_cast<int>(batch.rows), T),
                                         nn::token_tensor(batch.targets.data(), static_cast<int>(batch.rows), T), 1.0f},
                                        0};
      const exec::ProgramResult r = engine.evaluate(input);
      sum += r.loss_sum;
      count += r.counted;
    }
    return sum / static_cast<double>(count);
  };
  // On every rank (the same text): with ZeRO-3 the parameters are gathered for it.
  auto sample = [&]() {
    std::vector<int32_t> prompt = cfg.train.sample_prompt.empty() ? std::vector<int32_t>{dataset.val->at(0)}
                                                                 : dataset.tokenizer.encode(cfg.train.sample_prompt);
    if (prompt.empty()) prompt = {dataset.val->at(0)};
    SamplingOptions options{cfg.train.sample_tokens, cfg.train.sample_temperature, cfg.train.sample_top_k,
                            cfg.train.seed};
    parallel::DataParallel::FullParameters full = engine.full_parameters();
    return dataset.tokenizer.decode(generate(model, memory, full, prompt, options));
  };
  auto save = [&]() {
    CheckpointState state{step, data::to_json(loader.state()), cfg.train.seed, val_history};
    parallel::DataParallel::FullParameters full = engine.full_parameters();
    return checkpoints.save(cfg, state, model_state(model, engine, full), tokenizer_path, dp_comm);
  };
  auto message = [&](Progress* progress, const std::string& text) {
    if (progress != nullptr) progress->message(text);
  };

  std::optional<Progress> progress_holder;
  if (leader) progress_holder.emplace(step, cfg.train.steps, cfg.log.every, cfg.log.progress);
  Progress* progress = progress_holder ? &*progress_holder : nullptr;
  const data::RowRange my_rows = data::split_rows(cfg.train.batch_size, rank, ranks);
  const auto run_start = Clock::now();
  bool done = false;
  while (!done) {
    const auto t0 = Clock::now();
    const float lr = schedule.at(step);
    double local[2] = {0, 0};  // loss sum, counted targets
    const uint64_t first_sequence = loader.state().sequences;
    std::vector<data::Batch> batches;
    std::vector<exec::MicrobatchInput> inputs;
    for (int m = 0; m < accumulation; ++m) batches.push_back(loader.microbatch(rank, ranks, m, accumulation));
    for (int m = 0; m < accumulation; ++m) {
      const data::Batch& batch = batches[static_cast<size_t>(m)];
      const int rows = static_cast<int>(batch.rows);
      // Every target of the global batch counts once: the gradient is that of the batch's mean loss.
      // The global index of the microbatch's first sequence keys the dropout masks, so they do not
      // depend on the layout.
      inputs.push_back({{nn::token_tensor(batch.inputs.data(), rows, T), nn::token_tensor(batch.targets.data(), rows, T),
                         1.0f / static_cast<float>(tokens_per_step)},
                        static_cast<int64_t>(first_sequence) + my_rows.begin +
                            data::split_rows(my_rows.size(), m, accumulation).begin});
    }
    memory.reset_peaks();
    const parallel::TrainingEngine::StepResult stepped =
        engine.train_step(inputs, {cfg.train.seed, static_cast<uint64_t>(step)}, lr, cfg.optim.grad_clip);
    const MemoryStats step_memory = memory.stats();
    local[0] = stepped.loss_sum;
    local[1] = static_cast<double>(stepped.counted);
    loader.advance();
    const std::vector<double> global = parallel::sum_over_ranks(dp_comm, local);
    const double loss = global[0] / global[1];
    TS_CHECK(std::isfinite(loss),
             "the training loss became {} at step {}: training diverged. Lower optim.lr (now {}), raise "
             "optim.warmup_steps or keep optim.grad_clip on; resume from the last checkpoint with checkpoint.resume = "
             "\"latest\"",
             loss, step + 1, cfg.optim.lr);
    const double grad_norm = stepped.grad_norm.norm;
    if (stepped.skipped) {
      message(progress, fmt::format("step {}: the gradient norm is {}: no update on any rank (step skipped)", step + 1,
                                    grad_norm));
    }
    ++step;

    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    StepReport report{step, loss, lr, grad_norm, static_cast<double>(tokens_per_step) / seconds, 0,
                      step_memory.peak_total};
    report.mfu = report.tokens_per_second / ranks * flops_per_token / ceiling;
    if (progress) progress->update(report);
    result.losses.push_back(loss);
    train_series.x.push_back(static_cast<double>(step));
    train_series.y.push_back(loss);
    if (metrics) {
      metrics->write({{"kind", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                      {"tokens_per_second", report.tokens_per_second}, {"mfu", report.mfu}, {"step_seconds", seconds},
                      {"skipped", stepped.skipped}, {"memory", memory_json(step_memory)},
                      {"elapsed_seconds", std::chrono::duration<double>(Clock::now() - run_start).count()}});
    }

    // A time-limited job (exit_after) ends like the last step: evaluated and checkpointed.
    const bool last = step == cfg.train.steps ||
                      (cfg.train.exit_after > 0 && step - result.first_step == cfg.train.exit_after);
    if (last || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0)) {
      result.val_loss = evaluate();
      val_history.push_back(result.val_loss);
      val_series.x.push_back(static_cast<double>(step));
      val_series.y.push_back(result.val_loss);
      if (metrics) metrics->write({{"kind", "val"}, {"step", step}, {"loss", result.val_loss}});
      message(progress, fmt::format("step {}: val loss {:.4f} (train {:.4f}, unigram baseline {:.3f})", step,
                                    result.val_loss, loss, result.unigram_entropy));
      draw_chart();
    }
    if (!last && cfg.train.sample_every > 0 && step % cfg.train.sample_every == 0) {
      std::string text = sample();
      if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", text}});
      message(progress, fmt::format("step {} sample:\n{}\n", step, text));
    }
    if (last || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0)) {
      result.checkpoint_path = save();
      if (!last) message(progress, fmt::format("step {}: saved {}", step, result.checkpoint_path));
    }
    done = last;
  }
  if (progress) progress->finish();
  result.steps = step;
  draw_chart();
  if (cfg.train.sample_tokens > 0) {
    result.sample_text = sample();
    if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", result.sample_text}});
  }
  return result;
}

}  // namespace tessera::train
