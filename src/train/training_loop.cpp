// The step loop of a run and its end (train/training_run.h).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>

#include "core/atomic_file.h"
#include "core/host.h"
#include "dist/job_status.h"
#include "io/loss_chart.h"
#include "parallel/rank_sum.h"
#include "train/sampler.h"
#include "train/training_run.h"

namespace tessera::train {

namespace {

// What the MoE layers' routing did in a step (nn::MoeStatistics summed over the ranks), for its
// metrics.jsonl line: the mean aux and z losses per layer and microbatch, the fraction of token
// choices dropped by the capacity, and each expert's share of the rows kept.
nlohmann::json moe_fields(const nn::MoeStatistics& m) {
  int64_t kept = 0;
  for (int64_t l : m.load) kept += l;
  std::vector<double> load;
  for (int64_t l : m.load) load.push_back(kept > 0 ? static_cast<double>(l) / static_cast<double>(kept) : 0.0);
  const auto per_routing = [&](double sum) { return m.routings > 0 ? sum / static_cast<double>(m.routings) : 0.0; };
  return {{"moe_aux_loss", per_routing(m.aux_loss_sum)},
          {"moe_z_loss", per_routing(m.z_loss_sum)},
          {"moe_drop_rate", m.assignments > 0 ? static_cast<double>(m.dropped) / static_cast<double>(m.assignments) : 0.0},
          {"moe_expert_load", load}};
}

// Bytes the nvme tier has read and written (zero without one).
struct NvmeTraffic {
  double read = 0, written = 0;
  NvmeTraffic operator-(const NvmeTraffic& o) const { return {read - o.read, written - o.written}; }
  NvmeTraffic operator/(double n) const { return {read / n, written / n}; }
};
NvmeTraffic nvme_traffic(const memory::NvmeStore* store) {
  if (store == nullptr) return {};
  return {static_cast<double>(store->bytes_read()), static_cast<double>(store->bytes_written())};
}

// The step's peaks by tag and of every tag at once (the compute tier), the nvme tier's peak and
// traffic when something is offloaded, and the process's resident set (all it holds in RAM, the
// allocator's cache and the libraries' buffers included) at the step's end and at its highest so far.
nlohmann::json memory_json(const MemoryStats& stats, std::optional<size_t> nvme_peak, const NvmeTraffic& nvme_step) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t t = 0; t < kMemoryTagCount; ++t) {
    j[std::string(memory_tag_name(static_cast<MemoryTag>(t)))] = stats.peak[t];
  }
  j["peak"] = stats.peak_total;
  if (nvme_peak) {
    j["nvme"] = *nvme_peak;
    j["nvme_read"] = nvme_step.read;
    j["nvme_written"] = nvme_step.written;
  }
  const host::ResidentSet rss = host::resident_set();
  j["rss"] = rss.now;
  j["rss_peak"] = rss.peak;
  return j;
}

// What the activation encoding did in a step (of `batches` steps' counts): the bytes of the
// storages it encoded, before and after, in all and by the form they took.
nlohmann::json encoding_json(const exec::EncodingCounts& counts, double batches) {
  nlohmann::json forms = nlohmann::json::object();
  for (size_t f = 0; f < exec::kEncodedForms; ++f) {
    if (counts.dense_bytes[f] == 0) continue;
    forms[std::string(exec::encoded_form_name(static_cast<exec::EncodedForm>(f)))] = {
        {"from", static_cast<double>(counts.dense_bytes[f]) / batches},
        {"to", static_cast<double>(counts.encoded_bytes[f]) / batches}};
  }
  return {{"from", static_cast<double>(counts.total_dense()) / batches},
          {"to", static_cast<double>(counts.total_encoded()) / batches},
          {"forms", std::move(forms)}};
}

// The peaks of every rank (world order) from their slots of the step's sum; empty for one process.
nlohmann::json ranks_memory_json(const std::vector<double>& summed, size_t at, int world_size) {
  nlohmann::json all = nlohmann::json::array();
  if (world_size <= 1) return all;
  for (int r = 0; r < world_size; ++r) {
    const double* peaks = summed.data() + at + static_cast<size_t>(r) * (kMemoryTagCount + 1);
    nlohmann::json j = nlohmann::json::object();
    for (size_t t = 0; t < kMemoryTagCount; ++t) {
      j[std::string(memory_tag_name(static_cast<MemoryTag>(t)))] = static_cast<int64_t>(peaks[t]);
    }
    j["peak"] = static_cast<int64_t>(peaks[kMemoryTagCount]);
    all.push_back(std::move(j));
  }
  return all;
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// The steps of one engine call: their learning rates and microbatches.
struct TrainingRun::Steps {
  int64_t count = 0;
  std::vector<float> lrs;
  std::vector<data::Batch> batches;
  std::vector<exec::MicrobatchInput> inputs;  // point into the batches' rows
};

// What one engine call did on this rank, measured around it.
struct TrainingRun::EngineCall {
  std::vector<parallel::TrainingEngine::StepResult> stepped;
  MemoryStats step_memory;
  NvmeTraffic nvme_step;
  exec::EncodingCounts encoded;
  double dp_bytes_per_step = 0;
};

// The sums over all ranks of an engine call's steps: [loss sum, counted targets] per step, then the
// two stop flags, then every rank's memory peaks in their slots from `peaks_at`.
struct TrainingRun::StepSums {
  std::vector<double> global;
  size_t flags = 0;
  size_t peaks_at = 0;
  int signal_number = 0;  // this rank's own stop signal (0: none)
};

void TrainingRun::train() {
  // Every rank evaluates the same sequences (ZeRO-3 needs every rank in each gather), so the ranks
  // agree on the value without communicating it. How many: eval_batches global batches' worth,
  // each window of the validation split at most once, in microbatches of micro_batch_size — so
  // the value does not depend on the microbatch size.
  eval_sequences = std::min<int64_t>(int64_t{cfg.train.eval_batches} * cfg.train.batch_size,
                                     data::TokenLoader(dataset.val, {T, 1, 0, false}).windows_per_epoch());
  val.emplace(dataset.val, data::LoaderOptions{T, eval_sequences, 0, false});
  if (leader) {
    progress.emplace(step, cfg.train.steps, cfg.log.every, cfg.log.progress, flops_per_token, peak.flops, world_size);
  }
  my_rows = data::split_rows(cfg.train.batch_size, rank, ranks);
  // log.timeline: the second step this process runs is recorded (the first pays one-time costs:
  // page faults, buffers), or its only step; the recorder is handed to each step until then.
  timeline_pending = cfg.log.timeline;
  // log.profile: steps 2-4 of this process (train/profile_report.h), each an engine call of its own.
  profile.emplace(cfg.log.profile, result.first_step, cfg.train.steps);
  two_versions = engine.weight_versions() != nullptr;
  bool done = false;
  while (!done) {
    const auto t0 = Clock::now();
    const int64_t count = steps_until_drained(step);
    // A profiled step spans what step_seconds does: its data, the engine's call, the loss exchange.
    Profiler* const profiling = profile->begin(step + 1);
    const Steps steps = next_batches(count);
    const EngineCall call = call_engine(steps, profiling);
    const StepSums sums = exchange_sums(call, count);
    profile->end();
    // The steps of one engine call share its time: each is reported with the mean.
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(count);
    log_steps(steps, call, sums, seconds);

    // A job stopped before train.steps ends like the last step, with a checkpoint to resume from.
    const std::string reason = stop_reason(sums);
    const bool last = step == cfg.train.steps || !reason.empty();
    if (!reason.empty() && step < cfg.train.steps) {
      result.outcome = TrainResult::Outcome::StoppedEarly;
      result.stop_reason = reason;
    }
    // A stop signal asks for a prompt exit: the checkpoint, not an evaluation.
    after_steps(last, sums.global[sums.flags] > 0);
    done = last;
  }
}

// How many steps the next engine call runs. A flushing schedule drains the pipeline at every
// step. PipeDream-2BW runs without a flush up to the next step that needs the pipeline drained,
// with the newest weights in place and no batch in flight: a progress line (where the stop and
// time-limit checks are agreed on), an evaluation, a sample, a checkpoint, the recorded
// timeline, the end of the run. Where it drains does not change the numbers (training_engine.h).
int64_t TrainingRun::steps_until_drained(int64_t from) const {
  if (!two_versions) return int64_t{1};
  int64_t end = cfg.train.steps;
  for (const int64_t every : {int64_t{cfg.log.every}, int64_t{cfg.train.eval_every}, int64_t{cfg.train.sample_every},
                              int64_t{cfg.checkpoint.every}}) {
    if (every > 0) end = std::min(end, (from / every + 1) * every);
  }
  if (cfg.train.exit_after > 0) end = std::min(end, result.first_step + cfg.train.exit_after);
  if (timeline_pending) end = from + 1;  // the recorded step is a program of its own
  if (profile->profiles(from + 1) || profile->profiles(from + 2)) end = from + 1;
  return std::max<int64_t>(end - from, 1);
}

TrainingRun::Steps TrainingRun::next_batches(int64_t count) {
  Steps steps;
  steps.count = count;
  steps.batches.reserve(static_cast<size_t>(count * accumulation));  // the inputs point into the batches' rows
  for (int64_t s = 0; s < count; ++s) {
    steps.lrs.push_back(schedule.at(step + s));
    const uint64_t first_sequence = loader.state().sequences;
    for (int m = 0; m < accumulation; ++m) {
      const data::Batch& batch = steps.batches.emplace_back(loader.microbatch(rank, ranks, m, accumulation));
      const int rows = static_cast<int>(batch.rows);
      // Every target of the global batch counts once: the gradient is that of the batch's mean
      // loss. The global index of the microbatch's first sequence keys the dropout masks, so they
      // do not depend on the layout.
      steps.inputs.push_back({{nn::token_tensor(batch.inputs.data(), rows, T),
                               nn::token_tensor(batch.targets.data(), rows, T),
                               1.0f / static_cast<float>(tokens_per_step)},
                              static_cast<int64_t>(first_sequence) + my_rows.begin +
                                  data::split_rows(my_rows.size(), m, accumulation).begin});
    }
    loader.advance();
  }
  return steps;
}

TrainingRun::EngineCall TrainingRun::call_engine(const Steps& steps, Profiler* profiling) {
  memory.trim_cache();
  memory.reset_peaks();
  if (engine.nvme() != nullptr) engine.nvme()->reset_peak();
  // What this rank sends over its data-parallel group: the gradient reduction's traffic, which
  // compression shrinks (metrics.jsonl: dp_bytes_sent).
  dist::Communicator* dp_group = engine.data_parallel().comm();
  const uint64_t dp_bytes_before = dp_group != nullptr ? dp_group->stats().bytes_sent : 0;
  // The nvme tier's traffic of the step, as the copy engine completes it (metrics.jsonl:
  // memory.nvme_read and nvme_written, what `tessera plan --config` predicts as the step's I/O).
  const NvmeTraffic nvme_before = nvme_traffic(engine.nvme());
  EngineCall call;
  call.stepped = engine.train_batches(
      steps.inputs, {cfg.train.seed, static_cast<uint64_t>(step), timeline_pending ? &timeline : nullptr, profiling},
      steps.lrs, cfg.optim.grad_clip);
  call.step_memory = memory.stats();
  call.nvme_step = (nvme_traffic(engine.nvme()) - nvme_before) / static_cast<double>(steps.count);
  call.encoded =
      engine.activation_encoder() != nullptr ? engine.activation_encoder()->take_counts() : exec::EncodingCounts{};
  call.dp_bytes_per_step =
      static_cast<double>((dp_group != nullptr ? dp_group->stats().bytes_sent : 0) - dp_bytes_before) /
      static_cast<double>(steps.count);
  return call;
}

// Loss sums, counted targets, and whether this rank must stop (a signal, the time limit): summed
// over all ranks in the one message the steps send anyway, so they all stop at the same step.
// Every rank of a pipeline reports its pipeline's loss, so the ratio is the global batch's mean.
TrainingRun::StepSums TrainingRun::exchange_sums(const EngineCall& call, int64_t count) const {
  StepSums sums;
  const double minutes = std::chrono::duration<double>(Clock::now() - start.run_start).count() / 60.0;
  sums.signal_number = stop != nullptr ? stop->requested() : 0;
  const bool out_of_time = cfg.train.max_minutes > 0 && minutes >= cfg.train.max_minutes;
  std::vector<double> local;
  for (const parallel::TrainingEngine::StepResult& r : call.stepped) {
    local.push_back(r.loss_sum);
    local.push_back(static_cast<double>(r.counted));
  }
  local.push_back(sums.signal_number != 0 ? 1.0 : 0.0);
  local.push_back(out_of_time ? 1.0 : 0.0);
  // Every rank's peaks by tag, each in its own slot of the same sum: the worst rank of a layout
  // (a pipeline's last stage, say) is in metrics.jsonl without a message of its own.
  sums.peaks_at = local.size();
  if (world_size > 1) {
    local.resize(sums.peaks_at + static_cast<size_t>(world_size) * (kMemoryTagCount + 1), 0.0);
    double* mine = local.data() + sums.peaks_at + static_cast<size_t>(world->rank()) * (kMemoryTagCount + 1);
    for (size_t t = 0; t < kMemoryTagCount; ++t) mine[t] = static_cast<double>(call.step_memory.peak[t]);
    mine[kMemoryTagCount] = static_cast<double>(call.step_memory.peak_total);
  }
  sums.global = parallel::sum_over_ranks(world, local);
  sums.flags = 2 * static_cast<size_t>(count);
  return sums;
}

void TrainingRun::log_steps(const Steps& steps, const EngineCall& call, const StepSums& sums, double seconds) {
  for (int64_t s = 0; s < steps.count; ++s) {
    const parallel::TrainingEngine::StepResult& r = call.stepped[static_cast<size_t>(s)];
    const float lr = steps.lrs[static_cast<size_t>(s)];
    const double loss = sums.global[2 * static_cast<size_t>(s)] / sums.global[2 * static_cast<size_t>(s) + 1];
    // Under a loss scale an overflow (in the forward too) skips the step and lowers the scale;
    // only one that stays at the smallest scale is divergence.
    const bool overflow_handled = r.skipped && engine.loss_scaler().enabled() && r.loss_scale > 1.0;
    TS_CHECK(std::isfinite(loss) || overflow_handled,
             "the training loss became {} at step {}: training diverged. Lower optim.lr (now {}), raise "
             "optim.warmup_steps or keep optim.grad_clip on; resume from the last checkpoint with "
             "checkpoint.resume = \"latest\"",
             loss, step + 1, cfg.optim.lr);
    note_skipped_or_scaled(r, s + 1 == steps.count);
    ++step;

    const std::optional<size_t> nvme_peak =
        engine.nvme() != nullptr ? std::optional<size_t>(engine.nvme()->peak_bytes()) : std::nullopt;
    if (progress) {
      progress->update({step, loss, lr, r.grad_norm.norm, tokens_per_step, seconds, call.step_memory.peak_total,
                        nvme_peak});
    }
    result.losses.push_back(loss);
    history.train.x.push_back(static_cast<double>(step));
    history.train.y.push_back(loss);
    if (!metrics) continue;
    const double tokens_per_second = static_cast<double>(tokens_per_step) / seconds;
    const double mfu = model_flops_utilization(tokens_per_second / world_size * flops_per_token, peak.flops);
    nlohmann::json line = {{"kind", "train"}, {"step", step}, {"loss", loss}, {"lr", lr},
                           {"grad_norm", r.grad_norm.norm}, {"tokens_per_second", tokens_per_second},
                           {"mfu", mfu >= 0 ? nlohmann::json(mfu) : nlohmann::json(nullptr)}, {"step_seconds", seconds},
                           {"skipped", r.skipped}, {"loss_scale", r.loss_scale},
                           {"skipped_steps", engine.loss_scaler().state().skipped_steps},
                           {"memory", memory_json(call.step_memory, nvme_peak, call.nvme_step)},
                           {"memory_by_rank", ranks_memory_json(sums.global, sums.peaks_at, world_size)},
                           {"dp_bytes_sent", call.dp_bytes_per_step},
                           {"epoch", static_cast<double>(step) * cfg.train.batch_size / windows},
                           {"tokens_seen", step * tokens_per_step}, {"time", unix_time()},
                           {"elapsed_seconds",
                            elapsed_before + std::chrono::duration<double>(Clock::now() - start.run_start).count()}};
    if (r.moe.routings > 0) line.update(moe_fields(r.moe));
    if (engine.activation_encoder() != nullptr) {
      line["memory"]["encoded_activations"] = encoding_json(call.encoded, static_cast<double>(steps.count));
    }
    line["memory"]["recompute_seconds"] = r.recompute_seconds;
    if (cfg.optim.delayed_update_after > 0) line["update_wait_seconds"] = engine.delayed_update_wait_seconds();
    metrics->write(line);
  }
}

// The progress line's word on a skipped step or a grown loss scale (`last_of_call`: the engine
// call's last step, after which the scale is the one it grew to).
void TrainingRun::note_skipped_or_scaled(const parallel::TrainingEngine::StepResult& r, bool last_of_call) {
  const bool scaled = engine.loss_scaler().enabled();
  if (r.skipped && scaled) {
    message(fmt::format("step {}: the gradient overflowed at loss scale {:g}: no update on any rank "
                        "(step skipped, {} so far); the scale is now {:g}",
                        step + 1, r.loss_scale, engine.loss_scaler().state().skipped_steps,
                        engine.loss_scaler().scale()));
  } else if (r.skipped) {
    message(fmt::format("step {}: the gradient norm is {}: no update on any rank (step skipped)", step + 1,
                        r.grad_norm.norm));
  } else if (scaled && last_of_call && engine.loss_scaler().scale() > r.loss_scale) {
    message(fmt::format("step {}: {} finite steps in a row: the loss scale grows to {:g}", step + 1,
                        cfg.precision.growth_interval, engine.loss_scaler().scale()));
  }
}

std::string TrainingRun::stop_reason(const StepSums& sums) const {
  if (sums.global[sums.flags] > 0) {
    if (sums.signal_number == 0) return "stopped by a signal on another rank";
    // Under `tessera launch` the signal a user sent reached the launcher, which hands every stop on
    // as SIGUSR1 (mpirun would abort the job on the others): say so, or the user reads of a signal
    // nobody sent.
    const bool handed_on = sums.signal_number == SIGUSR1 && dist::JobStatus::of_this_process().has_value();
    return fmt::format("stopped by signal {} ({}){}", sums.signal_number, ::strsignal(sums.signal_number),
                       handed_on ? ", the stop tessera launch hands on for a Ctrl-C, SIGTERM or SIGHUP it received"
                                 : "");
  }
  if (sums.global[sums.flags + 1] > 0) return fmt::format("train.max_minutes = {} reached", cfg.train.max_minutes);
  if (cfg.train.exit_after > 0 && step - result.first_step == cfg.train.exit_after) {
    return fmt::format("train.exit_after = {} steps done in this process", cfg.train.exit_after);
  }
  return {};
}

// What follows the steps of an engine call: the recorded timeline, an evaluation, a sample, a
// checkpoint, each when it is due.
void TrainingRun::after_steps(bool last, bool signalled) {
  if (timeline_pending && (step - result.first_step == 2 || last)) {
    const pipeline::MeasuredTimeline measured = engine.measured_timeline(timeline);  // collective
    if (leader) {
      pipeline::write_measured_timeline(measured, start.folder->timeline_path());
      message(fmt::format("step {}: wrote {}", step, start.folder->timeline_path()));
    }
    timeline_pending = false;
  }
  if ((last && !signalled) || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0)) {
    result.val_loss = evaluate();
    result.val_step = step;
    val_history.push_back(result.val_loss);
    history.val.x.push_back(static_cast<double>(step));
    history.val.y.push_back(result.val_loss);
    if (metrics) metrics->write({{"kind", "val"}, {"step", step}, {"loss", result.val_loss}, {"time", unix_time()}});
    message(fmt::format("step {}: val loss {:.4f} (train {:.4f}, unigram baseline {:.3f})", step, result.val_loss,
                        result.losses.back(), result.unigram_entropy));
    draw_chart();
  } else if (step % cfg.log.every == 0 || step == result.first_step + 1) {
    draw_chart();  // the chart follows training from the first log line, not only at evaluations
  }
  if (!last && cfg.train.sample_every > 0 && step % cfg.train.sample_every == 0) {
    std::string text = sample();
    if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", text}, {"time", unix_time()}});
    message(fmt::format("step {} sample:\n{}\n", step, text));
  }
  const bool finished = step == cfg.train.steps;
  if ((last && (cfg.checkpoint.at_end || !finished)) || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0)) {
    result.checkpoint_path = save();
    if (!last) message(fmt::format("step {}: saved {}", step, result.checkpoint_path));
  }
}

void TrainingRun::finish() {
  if (progress) progress->finish();
  if (profile->enabled()) {
    const std::string table = profile->finish(
        world, {start.folder ? start.folder->trace_path() : std::string(),
                start.folder ? start.folder->profile_path() : std::string()});
    if (leader) fmt::print("{}", table);
  }
  result.steps = step;
  draw_chart();
  if (cfg.train.sample_tokens > 0 && result.outcome == TrainResult::Outcome::Finished) {
    result.sample_text = sample();
    if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", result.sample_text}, {"time", unix_time()}});
  }
}

// Evaluations, samples and checkpoints read the newest weights: a delayed update still running
// is applied first (so a resumed run, which starts with none pending, follows the same path).
double TrainingRun::evaluate() {
  engine.apply_delayed_update();
  double sum = 0;
  int64_t count = 0;
  for (int64_t begin = 0; begin < eval_sequences; begin += micro) {
    const int rows = static_cast<int>(std::min<int64_t>(micro, eval_sequences - begin));
    const data::Batch batch = val->rows(begin, rows);
    const exec::MicrobatchInput input{
        {nn::token_tensor(batch.inputs.data(), rows, T), nn::token_tensor(batch.targets.data(), rows, T), 1.0f}, 0};
    const exec::ProgramResult r = engine.evaluate(input);
    sum += r.loss_sum;
    count += r.counted;
  }
  return sum / static_cast<double>(count);
}

// On every rank (the same text): with ZeRO-3 the parameters are gathered for it.
std::string TrainingRun::sample() {
  engine.apply_delayed_update();
  std::vector<int32_t> prompt = cfg.train.sample_prompt.empty() ? std::vector<int32_t>{dataset.val->at(0)}
                                                               : dataset.tokenizer.encode(cfg.train.sample_prompt);
  if (prompt.empty()) prompt = {dataset.val->at(0)};
  SamplingOptions options{cfg.train.sample_tokens, cfg.train.sample_temperature, cfg.train.sample_top_k,
                          cfg.train.seed};
  parallel::DataParallel::ReadOnlyParameters full =
      engine.read_only_parameters(parallel::DataParallel::ReadOrder::AsTheReaderGoes);
  if (engine.tensor_parallel() == nullptr && engine.expert_parallel() == nullptr) {
    return dataset.tokenizer.decode(generate(model, memory, full, prompt, options));
  }
  // Sampling runs the one-process model: its parameters are gathered from the blocks.
  MemoryAccountant scratch;
  nn::GPT whole(cfg.model, scratch, cfg.train.seed);
  parallel::gather_parameters(engine.tensor_parallel(), model.parameters(), full, whole.parameters(),
                              engine.expert_parallel());
  return dataset.tokenizer.decode(generate(whole, scratch, whole.parameters(), prompt, options));
}

std::string TrainingRun::save() {
  const StopSignals::Saving saving(stop);
  engine.apply_delayed_update();
  const double elapsed = elapsed_before + std::chrono::duration<double>(Clock::now() - start.run_start).count();
  CheckpointState state{step, data::to_json(loader.state()), cfg.train.seed, val_history, elapsed, std::nullopt,
                        std::nullopt};
  if (engine.loss_scaler().enabled()) state.loss_scale = engine.loss_scaler().state();
  if (schedule.restart_step >= 0) {
    state.lr_restart = CheckpointState::LrRestart{schedule.restart_step, schedule.restart_rate};
  }
  return save_run_checkpoint(start.checkpoints, cfg, state, model, engine, tokenizer_path, world);
}

void TrainingRun::draw_chart() {
  if (!leader) return;
  io::ChartSpec chart;
  chart.title = fmt::format("tessera: {} ({} parameters)", cfg.train.out_dir, N);
  chart.series = {history.train, history.val};
  chart.reference_y = result.unigram_entropy;
  chart.reference_label = "unigram baseline";
  write_file_atomically(result.chart_path, io::render_chart_svg(chart));
}

void TrainingRun::message(const std::string& text) {
  if (progress) progress->message(text);
}

}  // namespace tessera::train
