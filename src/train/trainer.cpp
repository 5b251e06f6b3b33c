#include "train/trainer.h"

#include <fmt/ranges.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>

#include "core/atomic_file.h"
#include "core/host.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/mesh.h"
#include "io/metrics.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/matmul.h"
#include "nn/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/make_optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/rank_sum.h"
#include "parallel/training_engine.h"
#include "train/checkpoint.h"
#include "train/config_changes.h"
#include "train/memory_check.h"
#include "train/offload_folder.h"
#include "memory/disk_bandwidth.h"
#include "train/planned_run.h"
#include "train/peak_flops.h"
#include "train/profile_report.h"
#include "train/progress.h"
#include "train/run_folder.h"
#include "train/run_history.h"
#include "train/sampler.h"

namespace fs = std::filesystem;

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

using Clock = std::chrono::steady_clock;

// The groups of the layout (Megatron's rank order: tp fastest, then dp, then pp). Checks the layout
// first, so a wrong world size fails on every rank with the factors named.
std::optional<dist::Mesh> make_mesh(const RunConfig& cfg, dist::Communicator* world) {
  check_world_size(cfg, world == nullptr ? 1 : world->size());
  if (world == nullptr) return std::nullopt;
  return std::optional<dist::Mesh>(std::in_place, *world, cfg.layout());
}

}  // namespace

parallel::EngineOptions engine_options(const RunConfig& cfg) {
  parallel::EngineOptions o;
  o.layout = cfg.layout();
  o.bucket_bytes = static_cast<int64_t>(static_cast<double>(cfg.parallel.bucket_mb) * 1048576.0);
  o.optimizer = cfg.optim;  // the optimizer part of optim.*
  o.seq_len = cfg.model.seq_len;
  o.stage_layers = cfg.parallel.stage_layers;
  o.two_bw_versions = pipeline::parse_two_bw_versions(cfg.parallel.weight_version);
  o.compression = cfg.compression_options();
  o.precision = cfg.precision_options();
  o.recompute.policy = memory::parse_recompute_policy(cfg.memory.recompute);
  o.recompute.every_k = cfg.memory.recompute_every;
  o.recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(cfg.memory.activation_budget_mb) * 1048576.0);
  o.recompute.offload = exec::parse_activation_offload(cfg.memory.offload_activations);
  o.recompute.solver_seconds = cfg.memory.solver_seconds;
  // In the run folder, so that a resumed run reads the schedule its first start solved.
  o.recompute.solver_cache_dir = std::filesystem::path(cfg.train.out_dir) / "remat-cache";
  o.activation_encoding = exec::parse_activation_encoding(cfg.memory.activation_encoding);
  o.delayed_update_after = cfg.optim.delayed_update_after;
  if (cfg.memory.offload_optimizer == "nvme") {
    o.offload_optimizer_chunk_bytes = static_cast<int64_t>(static_cast<double>(cfg.memory.offload_chunk_mb) * 1048576.0);
  }
  o.offload_params = cfg.memory.offload_params == "nvme";
  return o;
}

ModelState model_state(nn::GPT& model, parallel::TrainingEngine& engine, nn::ParameterAccess& values) {
  ModelState state{model.parameters(), values, &engine.optimizer(), engine.data_parallel().owned()};
  state.rank_state = engine.rank_local_state();
  if (engine.pipeline() != nullptr) {
    state.pipeline_rank = engine.pipeline()->rank();
    if (engine.data_parallel().zero_stage() == 0) state.stage_params = engine.optimizer_parameters();
    state.writes_stage = engine.data_parallel().rank() == 0;
  }
  if (engine.tensor_parallel() != nullptr) {
    state.tensor_parallel = engine.tensor_parallel();
    state.writes_stage = engine.data_parallel().rank() == 0;
  }
  state.expert_parallel = engine.expert_parallel();
  state.segments = engine.ownership().master_segments();
  const bool sharded_by_zero = engine.data_parallel().zero_stage() >= 1;
  for (const nn::Parameter& p : model.parameters().all()) {
    state.writes_master.push_back(engine.writes_checkpoint_of(p, sharded_by_zero));
    state.writes_previous.push_back(engine.writes_checkpoint_of(p, false));
  }
  if (parallel::WeightVersions* versions = engine.weight_versions()) {
    state.previous_weights = versions->previous();
    state.previous_weights_rank = engine.pipeline() != nullptr ? engine.pipeline()->rank() : 0;
    state.tensor_parallel = engine.tensor_parallel();
    state.writes_previous_weights = engine.data_parallel().rank() == 0;
  }
  return state;
}

std::string save_run_checkpoint(const CheckpointStore& store, const RunConfig& cfg, const CheckpointState& state,
                                nn::GPT& model, parallel::TrainingEngine& engine, const std::string& tokenizer_path,
                                dist::Communicator* world) {
  parallel::DataParallel::ReadOnlyParameters values =
      engine.read_only_parameters(parallel::DataParallel::ReadOrder::EachOnceInStoreOrder);
  ModelState saved = model_state(model, engine, values);
  saved.values_read_together = values.read_together();
  return store.save(cfg, state, saved, tokenizer_path, world);
}

LoadedCheckpoint load_run_checkpoint(const std::string& path, const RunConfig& cfg, nn::GPT& model,
                                     parallel::TrainingEngine& engine, dist::Communicator* world) {
  parallel::DataParallel::WritableParameters into = engine.writable_parameters();
  ModelState state = model_state(model, engine, into);
  state.sink = &into;
  LoadedCheckpoint loaded = load_checkpoint(path, cfg, state, world);
  into.finish();
  loaded.parameters_one_at_a_time = into.one_at_a_time();
  return loaded;
}

LoadedWeights load_run_weights(const std::string& checkpoint, const RunConfig& cfg, nn::GPT& model,
                               parallel::TrainingEngine& engine) {
  parallel::DataParallel::WritableParameters into = engine.writable_parameters();
  ModelState weights{model.parameters(), into};
  weights.sink = &into;
  LoadedWeights loaded = load_weights(checkpoint, cfg.model, weights);
  into.finish();
  return loaded;
}

namespace {

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

// One line on how the step runs: the schedule, the recompute policy and what it costs.
std::string describe_plan(const RunConfig& cfg, const parallel::TrainingEngine& engine) {
  int recomputed = 0;
  for (const exec::Action& a : engine.program().actions) recomputed += a.phase == exec::Phase::Recompute;
  std::string text = fmt::format("execution: schedule {}{} ({} microbatches per step), recompute {}",
                                 cfg.parallel.schedule,
                                 cfg.parallel.schedule == "2bw" ? fmt::format(" with weight_version {}",
                                                                              cfg.parallel.weight_version)
                                                                : std::string(),
                                 cfg.accumulation_steps(), cfg.memory.recompute);
  if (cfg.memory.recompute == "every_k") {
    text += fmt::format(" (segments of {} blocks)", cfg.memory.recompute_every > 0
                                                        ? cfg.memory.recompute_every
                                                        : exec::default_every_k(cfg.model.n_layer));
  }
  if (cfg.memory.recompute == "optimal" || cfg.memory.recompute == "dtr" || cfg.memory.recompute == "checkmate") {
    text += fmt::format(" (budget {})", mib(cfg.memory.activation_budget_mb * 1048576.0));
  }
  text += describe_checkmate(engine.stages());
  text += fmt::format(": {} unit forwards recomputed per step", recomputed);
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
  if (cfg.memory.offloads()) {
    int offloaded = 0;
    for (const exec::Action& a : engine.program().actions) offloaded += a.offload;
    const size_t chunks = engine.optimizer_state_chunks();
    const bool params = cfg.memory.offload_params == "nvme";
    text += fmt::format("\nmemory tiers ({}): the activations {}; the optimizer state {}; {}",
                        cfg.memory.offload_dir.empty() ? cfg.train.out_dir + "/offload" : cfg.memory.offload_dir,
                        offloaded > 0 ? fmt::format("of {} unit forwards per step wait for their backward in the nvme "
                                                    "tier", offloaded)
                                      : std::string("in compute memory"),
                        chunks > 0 ? fmt::format("in the nvme tier, streamed through compute memory in {} chunk{} of "
                                                 "about {:g} MiB", chunks, chunks == 1 ? "" : "s",
                                                 cfg.memory.offload_chunk_mb)
                                   : std::string("in compute memory"),
                        params ? "ZeRO-3's parameter shard in the nvme tier, each unit's parameters read into compute "
                                 "memory before it runs (the next unit's while it runs) and the master values with "
                                 "the optimizer state's chunks; gradients in compute memory"
                               : "parameters and gradients in compute memory");
  }
  return text;
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

// Rank 0's text on every rank of `comm`.
std::string broadcast_string(dist::Communicator* comm, std::string text) {
  if (comm == nullptr || comm->size() == 1) return text;
  int32_t size = static_cast<int32_t>(text.size());
  comm->broadcast(std::span(&size, 1), 0)->wait();
  text.resize(static_cast<size_t>(size));
  if (size > 0) comm->broadcast(text.data(), text.size(), DType::U8, 0)->wait();
  return text;
}

// How many processes of `comm` run on this machine (they share its memory).
int processes_on_this_machine(dist::Communicator* comm) {
  if (comm == nullptr || comm->size() == 1) return 1;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  const uint64_t mine = std::hash<std::string>{}(name);
  std::vector<uint64_t> all(static_cast<size_t>(comm->size()));
  const std::vector<size_t> counts(all.size(), sizeof(uint64_t));
  comm->all_gather(&mine, all.data(), counts, DType::U8)->wait();
  return static_cast<int>(std::count(all.begin(), all.end(), mine));
}

// Where this run starts: a fresh run ("", possibly after clearing an earlier run in the folder when
// told to) or the checkpoint folder to resume. Decided by rank 0, which holds the folder.
std::string choose_start(const RunConfig& cfg, RunFolder& folder, const CheckpointStore& checkpoints,
                         std::string& note) {
  const std::string& resume = cfg.checkpoint.resume;
  const std::optional<std::string> earlier = folder.earlier_run();
  if (resume.empty()) {
    if (earlier && !cfg.train.overwrite) {
      TS_FAIL("the run folder '{}' already holds a run ({}); continue it with --checkpoint.resume latest (or auto), "
              "start over with --train.overwrite true (deletes its checkpoints and metrics), or choose another "
              "--train.out_dir",
              folder.path(), *earlier);
    }
    if (earlier) {
      folder.clear();
      note = fmt::format("train.overwrite: cleared the earlier run in {} ({})", folder.path(), *earlier);
    }
    return "";
  }
  if (resume == "auto") {
    if (std::optional<std::string> latest = checkpoints.latest_complete(&note)) return *latest;
    if (earlier) folder.clear();  // an earlier attempt that died before its first checkpoint
    note = fmt::format("checkpoint.resume = \"auto\": no checkpoint in {}, starting fresh", checkpoints.dir());
    return "";
  }
  // "latest", a run folder, its checkpoints/ folder or a step folder.
  return resolve_checkpoint(resume, checkpoints.dir(), &note);
}

}  // namespace

std::vector<std::string> data_size_warnings(const RunConfig& cfg, int64_t train_tokens, double epochs) {
  std::vector<std::string> warnings;
  // A piece the tokenizer learned from a handful of occurrences is one the model sees too rarely
  // to learn; below ~50 training tokens per piece most pieces are such.
  constexpr double kTokensPerPiece = 50;
  const double per_piece = static_cast<double>(train_tokens) / cfg.model.vocab_size;
  if (per_piece < kTokensPerPiece) {
    int64_t fits = 256;
    while (static_cast<double>(fits) * 2 * kTokensPerPiece <= static_cast<double>(train_tokens)) fits *= 2;
    warnings.push_back(fmt::format(
        "a vocabulary of {} pieces on {} training tokens is {:.1f} tokens per piece, fewer than the ~{:g} that let "
        "the model learn most pieces; prepare the data with a smaller --vocab-size (about {}), or give it more text",
        cfg.model.vocab_size, train_tokens, per_piece, kTokensPerPiece, fits));
  }
  // Past a few passes a model of this size memorizes the corpus: validation loss rises.
  constexpr double kManyEpochs = 4;
  if (epochs > kManyEpochs) {
    warnings.push_back(fmt::format(
        "{} steps read the training tokens {:.3g} times (epochs): past ~{:g} the model memorizes them and the "
        "validation loss rises; train fewer steps (train.steps) or on more text",
        cfg.train.steps, epochs, kManyEpochs));
  }
  return warnings;
}

void check_world_size(const RunConfig& cfg, int world_size) {
  const config::ParallelLayout layout = cfg.layout();
  try {
    layout.validate_world(world_size);
  } catch (const Error& e) {
    TS_FAIL("{}. tessera train runs parallel.dp × parallel.tp × parallel.pp processes: start it with `tessera launch "
            "-n {} -- train ...` (or mpirun -n {}), or set parallel.dp × parallel.tp × parallel.pp = {}",
            e.what(), layout.world_size(), layout.world_size(), world_size);
  }
}

Trainer::Trainer(RunConfig config, dist::Communicator* world, StopSignals* stop)
    : config_(std::move(config)), world_(world), stop_(stop) {}

TrainResult Trainer::run() {
  RunConfig& cfg = config_;
  TrainResult result;
  std::optional<dist::Mesh> mesh = make_mesh(cfg, world_);
  dist::Communicator* dp_comm = mesh ? &mesh->dp() : nullptr;
  dist::Communicator* pp_comm = mesh ? &mesh->pp() : nullptr;
  dist::Communicator* tp_comm = mesh ? &mesh->tp() : nullptr;
  // Expert parallelism: the experts of each MoE layer split over ep, their gradients reduced over edp.
  dist::Communicator* ep_comm = mesh && cfg.parallel.ep > 1 ? &mesh->ep() : nullptr;
  dist::Communicator* edp_comm = mesh && cfg.parallel.ep > 1 ? &mesh->edp() : nullptr;
  // The data-parallel rank picks the rows; the ranks of one pipeline read the same rows.
  const int rank = dp_comm ? dp_comm->rank() : 0, ranks = dp_comm ? dp_comm->size() : 1;
  const int world_size = world_ ? world_->size() : 1;
  // World rank 0 alone prints and writes the run folder; every rank computes.
  const bool leader = world_ == nullptr || world_->rank() == 0;
  const auto run_start = Clock::now();

  // Data first: a bad dataset fails before any memory is spent on the model.
  data::Dataset dataset = data::open_dataset(cfg.data.dir);
  if (cfg.vocab_from_data) {
    cfg.model.vocab_size = static_cast<int>(dataset.info.vocab_size);
  } else {
    data::check_model_vocab(cfg.model.vocab_size, dataset.info.vocab_size, cfg.data.dir);
  }
  cfg.validate();
  const RunMemory run_memory = run_memory_of(cfg);
  check_memory_fits(cfg, run_memory, processes_on_this_machine(world_), available_memory_bytes(),
                    host::resident_set().now);
  const int T = cfg.model.seq_len;
  const int micro = cfg.train.micro_batch_size;
  const int accumulation = cfg.accumulation_steps();
  data::TokenLoader loader(dataset.train, {T, cfg.train.batch_size, cfg.train.seed, true});

  // The run folder: rank 0 locks it and decides where the run starts; every rank learns that.
  std::optional<RunFolder> folder;
  CheckpointStore checkpoints((fs::path(cfg.train.out_dir) / "checkpoints").string(), cfg.checkpoint.keep);
  std::string start_note, resume_path;
  if (leader) {
    folder.emplace(cfg.train.out_dir);
    resume_path = choose_start(cfg, *folder, checkpoints, start_note);
  }
  resume_path = broadcast_string(world_, resume_path);
  result.run_dir = cfg.train.out_dir;
  result.metrics_path = (fs::path(cfg.train.out_dir) / "metrics.jsonl").string();
  result.chart_path = (fs::path(cfg.train.out_dir) / "loss.svg").string();
  // The config the checkpoint was saved with: what the resumed run changes of it is said, and
  // a change of the optimization is refused unless train.allow_changes.
  std::optional<RunConfig> saved_config;
  std::string changes_note;
  if (!resume_path.empty()) {
    const CheckpointManifest manifest = read_checkpoint_manifest(resume_path);
    const int64_t saved = manifest.state.step;
    // A finished run resumed (a requeued job that already completed) has nothing to do: say so, no work.
    if (saved >= cfg.train.steps) {
      result.outcome = TrainResult::Outcome::NothingToDo;
      result.stop_reason = fmt::format("checkpoint '{}' is at step {} of train.steps = {}: nothing to do (to train "
                                       "further, raise train.steps with --train.allow_changes true)",
                                       resume_path, saved, cfg.train.steps);
      result.first_step = result.steps = saved;
      result.checkpoint_path = resume_path;
      return result;
    }
    saved_config = checkpoint_run_config(manifest, resume_path);
    const std::vector<ConfigChange> changes = config_changes(manifest.config_toml, to_toml(cfg));
    // Another model shape or another optimizer cannot be resumed at all: loading the checkpoint
    // refuses those with their own fix, whatever train.allow_changes says.
    const bool loader_refuses = std::any_of(changes.begin(), changes.end(), [](const ConfigChange& c) {
      return c.key.starts_with("model.") || c.key == "optim.name";
    });
    std::vector<ConfigChange> refused;
    for (const ConfigChange& c : changes) {
      if (c.changes_optimization && !loader_refuses) refused.push_back(c);
    }
    TS_CHECK(refused.empty() || cfg.train.allow_changes,
             "resuming '{}' with {}: the run would no longer continue the one it resumes. Resume with the checkpoint's "
             "values, or accept the change with --train.allow_changes true (a different train.steps then continues "
             "the learning rate's decay from where it is)",
             resume_path, describe_changes(refused));
    if (!changes.empty()) changes_note = fmt::format("resuming with changes to the checkpoint's config: {}",
                                                     describe_changes(changes));
  }
  if (leader) write_file_atomically(folder->config_path(), to_toml(cfg));

  MemoryAccountant memory;
  // This rank's blocks of the parameters under tensor parallelism (none split at tp 1).
  const parallel::TensorParallelPlan tensor_plan(cfg.model, cfg.parallel.tp, tp_comm ? tp_comm->rank() : 0);
  const parallel::ExpertParallelPlan expert_plan(cfg.model, cfg.parallel.ep, ep_comm ? ep_comm->rank() : 0, &tensor_plan);
  nn::GPT model(cfg.model, memory, cfg.train.seed, &expert_plan);
  // The nvme tier: this rank's scratch folder, removed when the run ends.
  std::optional<OffloadFolder> offload;
  if (cfg.memory.offloads()) offload.emplace(cfg.memory.offload_dir, cfg.train.out_dir, world_ ? world_->rank() : 0);
  parallel::EngineOptions engine_settings = engine_options(cfg);
  std::optional<memory::DiskBandwidth> disk;
  if (offload) {
    engine_settings.offload_dir = offload->scratch();
    // Planning offload and recomputation together weighs recomputation against the disk's time.
    if (engine_settings.recompute.offload == exec::ActivationOffloadMode::Auto) {
      disk = memory::measure_disk_bandwidth(offload->scratch(), size_t{64} << 20, 2);
      engine_settings.recompute.disk_write_bytes_per_second = disk->write_bytes_per_second;
      engine_settings.recompute.disk_read_bytes_per_second = disk->read_bytes_per_second;
    }
  }
  parallel::TrainingEngine engine(model, memory, dp_comm, engine_settings, pp_comm, tp_comm, ep_comm, edp_comm);
  optim::WarmupCosine schedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
  const std::string tokenizer_path = (fs::path(cfg.data.dir) / "tokenizer.model").string();

  int64_t step = 0;
  std::vector<double> val_history;
  double checkpoint_elapsed = 0;  // the run's wall time up to the resumed checkpoint (0: not recorded)
  if (resume_path.empty() && !cfg.train.init_from.empty()) {
    // Weights only: the step, optimizer state, data position and seed stay this run's own.
    const LoadedWeights init = load_run_weights(cfg.train.init_from, cfg, model, engine);
    if (leader) {
      if (!init.note.empty()) fmt::print("{}\n", init.note);
      fmt::print("initialized from the weights of {}: a new run from step 0\n", init.path);
      if (!init.tokenizer_path.empty() && file_checksum(init.tokenizer_path) != file_checksum(tokenizer_path)) {
        fmt::print("warning: {}'s tokenizer differs from this data's ({}): the same ids may mean other text\n",
                   init.path, tokenizer_path);
      }
    }
  }
  std::string streamed_load_note;  // how the checkpoint went into the nvme tier, for the resume line
  if (!resume_path.empty()) {
    LoadedCheckpoint loaded = load_run_checkpoint(resume_path, cfg, model, engine, world_);
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
    optim::WarmupCosine before{saved_config->optim.lr, saved_config->optim.min_lr, saved_config->optim.warmup_steps,
                               saved_config->train.steps};
    if (loaded.state.lr_restart) {
      before.restart_step = loaded.state.lr_restart->step;
      before.restart_rate = static_cast<float>(loaded.state.lr_restart->rate);
    }
    if (saved_config->train.steps != cfg.train.steps && step >= before.warmup_steps) {
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
  result.first_step = step;

  std::optional<io::MetricsLog> metrics;
  RunHistory history;
  if (leader) {
    metrics.emplace(result.metrics_path, step > 0);
    if (step > 0) history = reload_history(result.metrics_path, step);
    result.unigram_entropy = unigram_entropy(*dataset.train, dataset.info.vocab_size);
  }
  // Elapsed time continues across resumes: the earlier processes' time, as the checkpoint recorded
  // it (the log's last line may be a few steps older), or from the log for checkpoints of format 1.
  const double elapsed_before = checkpoint_elapsed > 0 ? checkpoint_elapsed : history.elapsed_seconds;

  // The whole model's, whatever share of it this rank holds under tensor, pipeline or expert
  // parallelism: MFU divides the model's FLOPs by every process's time and peak, so it reads the
  // same under every layout.
  const int64_t N = cfg.model.parameter_count();
  // A token reads k of an MoE block's E experts: the MFU counts the parameters it reads.
  const int64_t active = cfg.model.active_parameter_count();
  const double flops_per_token = 6.0 * static_cast<double>(active) +
                                 12.0 * cfg.model.n_layer * cfg.model.n_embd * static_cast<double>(T);
  const int64_t tokens_per_step = static_cast<int64_t>(cfg.train.batch_size) * T;
  // An epoch is every training window once (data/loader.h): steps × batch_size sequences of them.
  const double windows = static_cast<double>(loader.windows_per_epoch());
  const double planned_epochs = static_cast<double>(cfg.train.steps) * cfg.train.batch_size / windows;
  // The MFU reference: fixed per machine (peak_flops.h), not re-measured under today's load.
  const MatmulPeak peak = leader ? matmul_peak(cfg.log.peak_gflops, omp_get_max_threads()) : MatmulPeak{};
  const double peak_flops = peak.flops;
  if (leader) {
    if (!start_note.empty()) fmt::print("{}\n", start_note);
    if (step > 0) fmt::print("resumed from {} at step {}{}\n", resume_path, step, streamed_load_note);
    if (!changes_note.empty()) fmt::print("{}\n", changes_note);
    if (schedule.restart_step >= 0 && schedule.restart_step == step) {
      fmt::print("train.steps is {} (the checkpoint's run had {}): the learning rate continues its decay from {:.3g} "
                 "at step {} to optim.min_lr = {:g} at step {}\n",
                 cfg.train.steps, saved_config->train.steps, schedule.restart_rate, step, cfg.optim.min_lr,
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
    if (world_size > 1) {
      fmt::print("mesh: {} processes = dp {} × pp {} × tp {} (tp the fastest-varying rank, then dp, then pp){}\n",
                 world_size, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp,
                 cfg.dp_from_world ? "; parallel.dp left out, so dp = processes / (tp × pp)" : "");
    }
    if (ranks > 1) {
      const size_t buckets = engine.data_parallel().buckets().size();
      fmt::print("parallel: dp {} with ZeRO stage {}; {} gradient bucket{} of up to {} MiB{}\n", ranks,
                 cfg.parallel.zero_stage, buckets, buckets == 1 ? "" : "s", cfg.parallel.bucket_mb,
                 cfg.optim.name == "onebit_adam"
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
    fmt::print("{}\n", describe_plan(cfg, engine));
    if (const config::PrecisionOptions precision = cfg.precision_options(); precision.mixed() || precision.grad_dtype != DType::F32) {
      fmt::print("precision: {}; 16-bit matmuls by {}\n", precision.describe(),
                 precision.mixed() ? kernels::half_gemm_description() : std::string("none"));
    }
    fmt::print("gemm: {}\n", kernels::gemm_libraries(cfg.precision_options().mixed() ? kernels::half_gemm_description()
                                                                                 : std::string()));
    if (const auto warning =
            kernels::generic_openblas_core_warning(kernels::openblas_core(), kernels::detect_cpu_vector_features())) {
      fmt::print("{}\n", *warning);
    }
    const std::string delayed =
        cfg.optim.delayed_update_after > 0
            ? fmt::format("; from step {} each update runs while the next step computes on the weights before it "
                          "(delayed by one step, 2 copies of the owned values and gradients beside it)",
                          cfg.optim.delayed_update_after + 1)
            : std::string();
    fmt::print("optimizer: {}, {} of state on this process{}\n", engine.optimizer().name(),
               mib(static_cast<double>(optim::state_bytes(cfg.optim, engine.ownership().master_segments()))), delayed);
    fmt::print("{}\n", run_memory.start_line);
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

  auto draw_chart = [&]() {
    if (!leader) return;
    io::ChartSpec chart;
    chart.title = fmt::format("tessera: {} ({} parameters)", cfg.train.out_dir, N);
    chart.series = {history.train, history.val};
    chart.reference_y = result.unigram_entropy;
    chart.reference_label = "unigram baseline";
    write_file_atomically(result.chart_path, io::render_chart_svg(chart));
  };
  // Every rank evaluates the same sequences (ZeRO-3 needs every rank in each gather), so the ranks
  // agree on the value without communicating it. How many: eval_batches global batches' worth,
  // each window of the validation split at most once, in microbatches of micro_batch_size — so
  // the value does not depend on the microbatch size.
  const int64_t eval_sequences = std::min<int64_t>(int64_t{cfg.train.eval_batches} * cfg.train.batch_size,
                                                   data::TokenLoader(dataset.val, {T, 1, 0, false}).windows_per_epoch());
  const data::TokenLoader val(dataset.val, {T, eval_sequences, 0, false});
  // Evaluations, samples and checkpoints read the newest weights: a delayed update still running
  // is applied first (so a resumed run, which starts with none pending, follows the same path).
  auto evaluate = [&]() {
    engine.apply_delayed_update();
    double sum = 0;
    int64_t count = 0;
    for (int64_t begin = 0; begin < eval_sequences; begin += micro) {
      const int rows = static_cast<int>(std::min<int64_t>(micro, eval_sequences - begin));
      const data::Batch batch = val.rows(begin, rows);
      const exec::MicrobatchInput input{
          {nn::token_tensor(batch.inputs.data(), rows, T), nn::token_tensor(batch.targets.data(), rows, T), 1.0f}, 0};
      const exec::ProgramResult r = engine.evaluate(input);
      sum += r.loss_sum;
      count += r.counted;
    }
    return sum / static_cast<double>(count);
  };
  // On every rank (the same text): with ZeRO-3 the parameters are gathered for it.
  auto sample = [&]() {
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
  };
  auto save = [&]() {
    const StopSignals::Saving saving(stop_);
    engine.apply_delayed_update();
    const double elapsed = elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count();
    CheckpointState state{step, data::to_json(loader.state()), cfg.train.seed, val_history, elapsed, std::nullopt, std::nullopt};
    if (engine.loss_scaler().enabled()) state.loss_scale = engine.loss_scaler().state();
    if (schedule.restart_step >= 0) state.lr_restart = CheckpointState::LrRestart{schedule.restart_step, schedule.restart_rate};
    return save_run_checkpoint(checkpoints, cfg, state, model, engine, tokenizer_path, world_);
  };
  auto message = [&](Progress* progress, const std::string& text) {
    if (progress != nullptr) progress->message(text);
  };

  std::optional<Progress> progress_holder;
  if (leader) {
    progress_holder.emplace(step, cfg.train.steps, cfg.log.every, cfg.log.progress, flops_per_token, peak_flops,
                            world_size);
  }
  Progress* progress = progress_holder ? &*progress_holder : nullptr;
  const data::RowRange my_rows = data::split_rows(cfg.train.batch_size, rank, ranks);
  // log.timeline: the second step this process runs is recorded (the first pays one-time costs:
  // page faults, buffers), or its only step; the recorder is handed to each step until then.
  exec::TimelineRecorder timeline;
  bool timeline_pending = cfg.log.timeline;
  // log.profile: steps 2-4 of this process (train/profile_report.h), each an engine call of its own.
  RunProfile profile(cfg.log.profile, result.first_step, cfg.train.steps);
  // How many steps the next engine call runs. A flushing schedule drains the pipeline at every
  // step. PipeDream-2BW runs without a flush up to the next step that needs the pipeline drained,
  // with the newest weights in place and no batch in flight: a progress line (where the stop and
  // time-limit checks are agreed on), an evaluation, a sample, a checkpoint, the recorded
  // timeline, the end of the run. Where it drains does not change the numbers (training_engine.h).
  const bool two_versions = engine.weight_versions() != nullptr;
  auto steps_until_drained = [&](int64_t from) {
    if (!two_versions) return int64_t{1};
    int64_t end = cfg.train.steps;
    for (const int64_t every : {int64_t{cfg.log.every}, int64_t{cfg.train.eval_every}, int64_t{cfg.train.sample_every},
                                int64_t{cfg.checkpoint.every}}) {
      if (every > 0) end = std::min(end, (from / every + 1) * every);
    }
    if (cfg.train.exit_after > 0) end = std::min(end, result.first_step + cfg.train.exit_after);
    if (timeline_pending) end = from + 1;  // the recorded step is a program of its own
    if (profile.profiles(from + 1) || profile.profiles(from + 2)) end = from + 1;
    return std::max<int64_t>(end - from, 1);
  };
  bool done = false;
  while (!done) {
    const auto t0 = Clock::now();
    const int64_t count = steps_until_drained(step);
    // A profiled step spans what step_seconds does: its data, the engine's call, the loss exchange.
    Profiler* const profiling = profile.begin(step + 1);
    std::vector<float> lrs;
    std::vector<data::Batch> batches;
    std::vector<exec::MicrobatchInput> inputs;
    batches.reserve(static_cast<size_t>(count * accumulation));  // the inputs point into the batches' rows
    for (int64_t s = 0; s < count; ++s) {
      lrs.push_back(schedule.at(step + s));
      const uint64_t first_sequence = loader.state().sequences;
      for (int m = 0; m < accumulation; ++m) {
        const data::Batch& batch = batches.emplace_back(loader.microbatch(rank, ranks, m, accumulation));
        const int rows = static_cast<int>(batch.rows);
        // Every target of the global batch counts once: the gradient is that of the batch's mean
        // loss. The global index of the microbatch's first sequence keys the dropout masks, so they
        // do not depend on the layout.
        inputs.push_back({{nn::token_tensor(batch.inputs.data(), rows, T),
                           nn::token_tensor(batch.targets.data(), rows, T), 1.0f / static_cast<float>(tokens_per_step)},
                          static_cast<int64_t>(first_sequence) + my_rows.begin +
                              data::split_rows(my_rows.size(), m, accumulation).begin});
      }
      loader.advance();
    }
    memory.reset_peaks();
    if (engine.nvme() != nullptr) engine.nvme()->reset_peak();
    // What this rank sends over its data-parallel group: the gradient reduction's traffic, which
    // compression shrinks (metrics.jsonl: dp_bytes_sent).
    dist::Communicator* dp_group = engine.data_parallel().comm();
    const uint64_t dp_bytes_before = dp_group != nullptr ? dp_group->stats().bytes_sent : 0;
    // The nvme tier's traffic of the step, as the copy engine completes it (metrics.jsonl:
    // memory.nvme_read and nvme_written, what `tessera plan --config` predicts as the step's I/O).
    const NvmeTraffic nvme_before = nvme_traffic(engine.nvme());
    const std::vector<parallel::TrainingEngine::StepResult> stepped = engine.train_batches(
        inputs, {cfg.train.seed, static_cast<uint64_t>(step), timeline_pending ? &timeline : nullptr, profiling}, lrs,
        cfg.optim.grad_clip);
    const MemoryStats step_memory = memory.stats();
    const NvmeTraffic nvme_step = (nvme_traffic(engine.nvme()) - nvme_before) / count;
    const exec::EncodingCounts encoded =
        engine.activation_encoder() != nullptr ? engine.activation_encoder()->take_counts() : exec::EncodingCounts{};
    const double dp_bytes_per_step =
        static_cast<double>((dp_group != nullptr ? dp_group->stats().bytes_sent : 0) - dp_bytes_before) /
        static_cast<double>(count);
    // Loss sums, counted targets, and whether this rank must stop (a signal, the time limit): summed
    // over all ranks in the one message the steps send anyway, so they all stop at the same step.
    // Every rank of a pipeline reports its pipeline's loss, so the ratio is the global batch's mean.
    const double minutes = std::chrono::duration<double>(Clock::now() - run_start).count() / 60.0;
    const int signal_number = stop_ != nullptr ? stop_->requested() : 0;
    const bool out_of_time = cfg.train.max_minutes > 0 && minutes >= cfg.train.max_minutes;
    std::vector<double> local;
    for (const parallel::TrainingEngine::StepResult& r : stepped) {
      local.push_back(r.loss_sum);
      local.push_back(static_cast<double>(r.counted));
    }
    local.push_back(signal_number != 0 ? 1.0 : 0.0);
    local.push_back(out_of_time ? 1.0 : 0.0);
    // Every rank's peaks by tag, each in its own slot of the same sum: the worst rank of a layout
    // (a pipeline's last stage, say) is in metrics.jsonl without a message of its own.
    const size_t peaks_at = local.size();
    if (world_size > 1) {
      local.resize(peaks_at + static_cast<size_t>(world_size) * (kMemoryTagCount + 1), 0.0);
      double* mine = local.data() + peaks_at + static_cast<size_t>(world_->rank()) * (kMemoryTagCount + 1);
      for (size_t t = 0; t < kMemoryTagCount; ++t) mine[t] = static_cast<double>(step_memory.peak[t]);
      mine[kMemoryTagCount] = static_cast<double>(step_memory.peak_total);
    }
    const std::vector<double> global = parallel::sum_over_ranks(world_, local);
    profile.end();
    const size_t flags = 2 * static_cast<size_t>(count);
    // The steps of one engine call share its time: each is reported with the mean.
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(count);
    for (int64_t s = 0; s < count; ++s) {
      const parallel::TrainingEngine::StepResult& r = stepped[static_cast<size_t>(s)];
      const float lr = lrs[static_cast<size_t>(s)];
      const double loss = global[2 * static_cast<size_t>(s)] / global[2 * static_cast<size_t>(s) + 1];
      // Under a loss scale an overflow (in the forward too) skips the step and lowers the scale;
      // only one that stays at the smallest scale is divergence.
      const bool overflow_handled = r.skipped && engine.loss_scaler().enabled() && r.loss_scale > 1.0;
      TS_CHECK(std::isfinite(loss) || overflow_handled,
               "the training loss became {} at step {}: training diverged. Lower optim.lr (now {}), raise "
               "optim.warmup_steps or keep optim.grad_clip on; resume from the last checkpoint with "
               "checkpoint.resume = \"latest\"",
               loss, step + 1, cfg.optim.lr);
      const double grad_norm = r.grad_norm.norm;
      const bool scaled = engine.loss_scaler().enabled();
      if (r.skipped && scaled) {
        message(progress, fmt::format("step {}: the gradient overflowed at loss scale {:g}: no update on any rank "
                                      "(step skipped, {} so far); the scale is now {:g}",
                                      step + 1, r.loss_scale, engine.loss_scaler().state().skipped_steps,
                                      engine.loss_scaler().scale()));
      } else if (r.skipped) {
        message(progress, fmt::format("step {}: the gradient norm is {}: no update on any rank (step skipped)",
                                      step + 1, grad_norm));
      } else if (scaled && s + 1 == count && engine.loss_scaler().scale() > r.loss_scale) {
        message(progress, fmt::format("step {}: {} finite steps in a row: the loss scale grows to {:g}", step + 1,
                                      cfg.precision.growth_interval, engine.loss_scaler().scale()));
      }
      ++step;

      const std::optional<size_t> nvme_peak =
          engine.nvme() != nullptr ? std::optional<size_t>(engine.nvme()->peak_bytes()) : std::nullopt;
      if (progress) {
        progress->update({step, loss, lr, grad_norm, tokens_per_step, seconds, step_memory.peak_total, nvme_peak});
      }
      result.losses.push_back(loss);
      history.train.x.push_back(static_cast<double>(step));
      history.train.y.push_back(loss);
      if (metrics) {
        const double tokens_per_second = static_cast<double>(tokens_per_step) / seconds;
        const double mfu = model_flops_utilization(tokens_per_second / world_size * flops_per_token, peak_flops);
        nlohmann::json line = {{"kind", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                        {"tokens_per_second", tokens_per_second},
                        {"mfu", mfu >= 0 ? nlohmann::json(mfu) : nlohmann::json(nullptr)}, {"step_seconds", seconds},
                        {"skipped", r.skipped}, {"loss_scale", r.loss_scale},
                        {"skipped_steps", engine.loss_scaler().state().skipped_steps},
                        {"memory", memory_json(step_memory, nvme_peak, nvme_step)},
                        {"memory_by_rank", ranks_memory_json(global, peaks_at, world_size)},
                        {"dp_bytes_sent", dp_bytes_per_step},
                        {"epoch", static_cast<double>(step) * cfg.train.batch_size / windows},
                        {"tokens_seen", step * tokens_per_step}, {"time", unix_time()},
                        {"elapsed_seconds",
                         elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count()}};
        if (r.moe.routings > 0) line.update(moe_fields(r.moe));
        if (engine.activation_encoder() != nullptr) line["memory"]["encoded_activations"] = encoding_json(encoded, count);
        line["memory"]["recompute_seconds"] = r.recompute_seconds;
        if (cfg.optim.delayed_update_after > 0) line["update_wait_seconds"] = engine.delayed_update_wait_seconds();
        metrics->write(line);
      }
    }

    // A job stopped before train.steps ends like the last step, with a checkpoint to resume from.
    std::string stop_reason;
    if (global[flags] > 0) {
      stop_reason = signal_number != 0 ? fmt::format("stopped by signal {} ({})", signal_number, ::strsignal(signal_number))
                                       : std::string("stopped by a signal on another rank");
    } else if (global[flags + 1] > 0) {
      stop_reason = fmt::format("train.max_minutes = {} reached", cfg.train.max_minutes);
    } else if (cfg.train.exit_after > 0 && step - result.first_step == cfg.train.exit_after) {
      stop_reason = fmt::format("train.exit_after = {} steps done in this process", cfg.train.exit_after);
    }
    const bool last = step == cfg.train.steps || !stop_reason.empty();
    if (!stop_reason.empty() && step < cfg.train.steps) {
      result.outcome = TrainResult::Outcome::StoppedEarly;
      result.stop_reason = stop_reason;
    }
    if (timeline_pending && (step - result.first_step == 2 || last)) {
      const pipeline::MeasuredTimeline measured = engine.measured_timeline(timeline);  // collective
      if (leader) {
        pipeline::write_measured_timeline(measured, folder->timeline_path());
        message(progress, fmt::format("step {}: wrote {}", step, folder->timeline_path()));
      }
      timeline_pending = false;
    }
    // A stop signal asks for a prompt exit: the checkpoint, not an evaluation.
    const bool signalled = global[flags] > 0;
    if ((last && !signalled) || (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0)) {
      result.val_loss = evaluate();
      result.val_step = step;
      val_history.push_back(result.val_loss);
      history.val.x.push_back(static_cast<double>(step));
      history.val.y.push_back(result.val_loss);
      if (metrics) metrics->write({{"kind", "val"}, {"step", step}, {"loss", result.val_loss}, {"time", unix_time()}});
      message(progress, fmt::format("step {}: val loss {:.4f} (train {:.4f}, unigram baseline {:.3f})", step,
                                    result.val_loss, result.losses.back(), result.unigram_entropy));
      draw_chart();
    } else if (step % cfg.log.every == 0 || step == result.first_step + 1) {
      draw_chart();  // the chart follows training from the first log line, not only at evaluations
    }
    if (!last && cfg.train.sample_every > 0 && step % cfg.train.sample_every == 0) {
      std::string text = sample();
      if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", text}, {"time", unix_time()}});
      message(progress, fmt::format("step {} sample:\n{}\n", step, text));
    }
    if (last || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0)) {
      result.checkpoint_path = save();
      if (!last) message(progress, fmt::format("step {}: saved {}", step, result.checkpoint_path));
    }
    done = last;
  }
  if (progress) progress->finish();
  if (profile.enabled()) {
    const std::string table =
        profile.finish(world_, {folder ? folder->trace_path() : std::string(), folder ? folder->profile_path() : std::string()});
    if (leader) fmt::print("{}", table);
  }
  result.steps = step;
  draw_chart();
  if (cfg.train.sample_tokens > 0 && result.outcome == TrainResult::Outcome::Finished) {
    result.sample_text = sample();
    if (metrics) metrics->write({{"kind", "sample"}, {"step", step}, {"text", result.sample_text}, {"time", unix_time()}});
  }
  return result;
}

}  // namespace tessera::train
