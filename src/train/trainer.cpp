#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "data/loader.h"
#include "io/loss_chart.h"
#include "io/metrics.h"
#include "kernels/cpu/grad_norm.h"
#include "nn/gpt.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
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
  io::write_file_atomically(path, kept);
}

}  // namespace

Trainer::Trainer(RunConfig config) : config_(std::move(config)) {}

TrainResult Trainer::run() {
  RunConfig& cfg = config_;
  TrainResult result;

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

  fs::create_directories(cfg.train.out_dir);
  result.run_dir = cfg.train.out_dir;
  result.metrics_path = (fs::path(cfg.train.out_dir) / "metrics.jsonl").string();
  result.chart_path = (fs::path(cfg.train.out_dir) / "loss.svg").string();
  io::write_file_atomically((fs::path(cfg.train.out_dir) / "config.toml").string(), to_toml(cfg));

  MemoryAccountant memory;
  nn::GPT model(cfg.model, memory, cfg.train.seed);
  optim::AdamW optimizer(model.parameters(), memory,
                         {cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay});
  const optim::WarmupCosine schedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  CheckpointStore checkpoints((fs::path(cfg.train.out_dir) / "checkpoints").string(), cfg.checkpoint.keep);
  const std::string tokenizer_path = (fs::path(cfg.data.dir) / "tokenizer.model").string();

  int64_t step = 0;
  std::vector<double> val_history;
  if (!cfg.checkpoint.resume.empty()) {
    std::string path = cfg.checkpoint.resume;
    if (path == "latest") {
      std::optional<std::string> latest = checkpoints.latest();
      TS_CHECK(latest.has_value(), "checkpoint.resume = \"latest\" but '{}' holds no checkpoint; start without it",
               checkpoints.dir());
      path = *latest;
    }
    LoadedCheckpoint loaded = load_checkpoint(path, cfg, model.parameters(), &optimizer);
    step = loaded.state.step;
    loader.restore(data::loader_state_from_json(loaded.state.data_position));
    TS_CHECK(loaded.state.seed == cfg.train.seed,
             "checkpoint '{}' was trained with train.seed = {} but this run has {}; resume with the same seed",
             path, loaded.state.seed, cfg.train.seed);
    TS_CHECK(step < cfg.train.steps, "checkpoint '{}' is at step {}, which is not before train.steps = {}: nothing to do; "
             "raise train.steps to train further", path, step, cfg.train.steps);
    truncate_history(result.metrics_path, step);
    fmt::print("resumed from {} at step {}\n", path, step);
  }
  result.first_step = step;

  io::MetricsLog metrics(result.metrics_path, step > 0);
  io::Series train_series{"train loss", "#1f77b4", {}, {}, false};
  io::Series val_series{"val loss", "#d62728", {}, {}, true};
  if (step > 0) reload_history(result.metrics_path, step, train_series, val_series);
  result.unigram_entropy = unigram_entropy(*dataset.train, dataset.info.vocab_size);

  const int64_t N = model.parameters().numel();
  const double flops_per_token = 6.0 * static_cast<double>(N) +
                                 12.0 * cfg.model.n_layer * cfg.model.n_embd * static_cast<double>(T);
  const double ceiling = measure_matmul_ceiling(0.25);
  const int64_t tokens_per_step = static_cast<int64_t>(cfg.train.batch_size) * T;
  fmt::print("model: {} parameters ({} layers, {} heads, {} channels, vocab {}, context {})\n", N, cfg.model.n_layer,
             cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size, T);
  fmt::print("data: {} training tokens, {} validation tokens; {} tokens per step (dp {} × {} microbatches of {} × {})\n",
             dataset.train->size(), dataset.val->size(), tokens_per_step, cfg.parallel.dp, accumulation, micro, T);
  fmt::print("measured matmul ceiling {:.1f} GFLOP/s; {:.1f} MFLOP per token; unigram baseline {:.3f} nats\n",
             ceiling / 1e9, flops_per_token / 1e6, result.unigram_entropy);
  fmt::print("run folder: {}\n", cfg.train.out_dir);

  auto draw_chart = [&]() {
    io::ChartSpec chart;
    chart.title = fmt::format("tessera: {} ({} parameters)", cfg.train.out_dir, N);
    chart.series = {train_series, val_series};
    chart.reference_y = result.unigram_entropy;
    chart.reference_label = "unigram baseline";
    io::write_file_atomically(result.chart_path, io::render_chart_svg(chart));
  };
  auto evaluate = [&]() {
    nn::StepContext ctx{memory};
    ctx.training = false;
    double sum = 0;
    int64_t count = 0;
    data::TokenLoader val = val_loader;
    const int batches = static_cast<int>(std::min<int64_t>(cfg.train.eval_batches, std::max<int64_t>(1, val.windows_per_epoch() / micro)));
    for (int b = 0; b < batches; ++b) {
      data::Batch batch = val.next();
      int64_t n = 0;
      sum += model.evaluate(ctx, batch.inputs.data(), batch.targets.data(), static_cast<int>(batch.rows), T, &n);
      count += n;
    }
    return sum / static_cast<double>(count);
  };
  auto sample = [&]() {
    std::vector<int32_t> prompt = cfg.train.sample_prompt.empty() ? std::vector<int32_t>{dataset.val->at(0)}
                                                                 : dataset.tokenizer.encode(cfg.train.sample_prompt);
    if (prompt.empty()) prompt = {dataset.val->at(0)};
    SamplingOptions options{cfg.train.sample_tokens, cfg.train.sample_temperature, cfg.train.sample_top_k,
                            cfg.train.seed};
    return dataset.tokenizer.decode(generate(model, memory, prompt, options));
  };
  auto save = [&]() {
    CheckpointState state{step, data::to_json(loader.state()), cfg.train.seed, val_history};
    return checkpoints.save(cfg, state, model.parameters(), optimizer, tokenizer_path);
  };

  Progress progress(step, cfg.train.steps, cfg.log.every, cfg.log.progress);
  std::vector<std::pair<float*, size_t>> grad_buffers = {
      {model.parameters().flat_grads().data<float>(), static_cast<size_t>(N)}};
  const auto run_start = Clock::now();
  bool done = false;
  while (!done) {
    const auto t0 = Clock::now();
    const float lr = schedule.at(step);
    model.parameters().zero_grads();
    double loss_sum = 0;
    int64_t counted = 0;
    const uint64_t first_sequence = loader.state().sequences;
    for (int m = 0; m < accumulation; ++m) {
      data::Batch batch = loader.microbatch(0, 1, m, accumulation);
      for (int32_t t : batch.targets) counted += t != nn::GPT::kIgnoreIndex;
      nn::StepContext ctx{memory};
      ctx.seed = cfg.train.seed;
      ctx.step = static_cast<uint64_t>(step);
      ctx.sample_offset = static_cast<int64_t>(first_sequence) + data::split_rows(cfg.train.batch_size, m, accumulation).begin;
      nn::GPT::Ctx fwd;
      // Every target of the global batch counts once: the gradient is that of the batch's mean loss.
      loss_sum += model.forward(ctx, fwd, batch.inputs.data(), batch.targets.data(), static_cast<int>(batch.rows), T,
                                1.0f / static_cast<float>(tokens_per_step));
      model.backward(ctx, fwd);
    }
    loader.advance();
    const double loss = loss_sum / static_cast<double>(counted);
    TS_CHECK(std::isfinite(loss),
             "the training loss became {} at step {}: training diverged. Lower optim.lr (now {}), raise "
             "optim.warmup_steps or keep optim.grad_clip on; resume from the last checkpoint with checkpoint.resume = "
             "\"latest\"",
             loss, step + 1, cfg.optim.lr);
    const double grad_norm = kernels::clip_grad_norm(grad_buffers, cfg.optim.grad_clip);
    optimizer.step(lr);
    ++step;

    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    StepReport report{step, loss, lr, grad_norm, static_cast<double>(tokens_per_step) / seconds, 0};
    report.mfu = report.tokens_per_second * flops_per_token / ceiling;
    progress.update(report);
    result.losses.push_back(loss);
    train_series.x.push_back(static_cast<double>(step));
    train_series.y.push_back(loss);
    metrics.write({{"kind", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                   {"tokens_per_second", report.tokens_per_second}, {"mfu", report.mfu}, {"step_seconds", seconds},
                   {"elapsed_seconds", std::chrono::duration<double>(Clock::now() - run_start).count()}});

    // A time-limited job (exit_after) ends like the last step: evaluated and checkpointed.
    const bool last = step == cfg.train.steps ||
                      (cfg.train.exit_after > 0 && step - result.first_step == cfg.train.exit_after);
    if (last || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0)) {
      result.val_loss = evaluate();
      val_history.push_back(result.val_loss);
      val_series.x.push_back(static_cast<double>(step));
      val_series.y.push_back(result.val_loss);
      metrics.write({{"kind", "val"}, {"step", step}, {"loss", result.val_loss}});
      progress.message(fmt::format("step {}: val loss {:.4f} (train {:.4f}, unigram baseline {:.3f})", step,
                                   result.val_loss, loss, result.unigram_entropy));
      draw_chart();
    }
    if (!last && cfg.train.sample_every > 0 && step % cfg.train.sample_every == 0) {
      std::string text = sample();
      metrics.write({{"kind", "sample"}, {"step", step}, {"text", text}});
      progress.message(fmt::format("step {} sample:\n{}\n", step, text));
    }
    if (last || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0)) {
      result.checkpoint_path = save();
      if (!last) progress.message(fmt::format("step {}: saved {}", step, result.checkpoint_path));
    }
    done = last;
  }
  progress.finish();
  result.steps = step;
  draw_chart();
  if (cfg.train.sample_tokens > 0) {
    result.sample_text = sample();
    metrics.write({{"kind", "sample"}, {"step", step}, {"text", result.sample_text}});
  }
  return result;
}

}  // namespace tessera::train
