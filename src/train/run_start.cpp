// Where a run starts (train/training_run.h): the layout's groups, the data, the run folder and the
// checkpoint it resumes.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "core/atomic_file.h"
#include "core/host.h"
#include "train/config_changes.h"
#include "train/training_run.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

// The groups of the layout (Megatron's rank order: tp fastest, then dp, then pp). Checks the layout
// first, so a wrong world size fails on every rank with the factors named.
std::optional<dist::Mesh> make_mesh(const RunConfig& cfg, dist::Communicator* world) {
  check_world_size(cfg, world == nullptr ? 1 : world->size());
  if (world == nullptr) return std::nullopt;
  return std::optional<dist::Mesh>(std::in_place, *world, cfg.layout());
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

// Data first: a bad dataset fails before any memory is spent on the model. The model's vocabulary
// comes from the data where the config leaves it out, and then the config is checked whole.
data::Dataset open_checked_dataset(RunConfig& cfg) {
  data::Dataset dataset = data::open_dataset(cfg.data.dir);
  if (cfg.vocab_from_data) {
    cfg.model.vocab_size = static_cast<int>(dataset.info.vocab_size);
  } else {
    data::check_model_vocab(cfg.model.vocab_size, dataset.info.vocab_size, cfg.data.dir);
  }
  cfg.validate();
  // Every run evaluates at its end, whatever train.eval_every says; refused here, before the run
  // folder is made, rather than when the first evaluation comes.
  TS_CHECK(dataset.val->size() >= cfg.model.seq_len + 1,
           "the validation split {} has {} tokens, fewer than the model.seq_len + 1 = {} of one evaluation sequence "
           "(a run evaluates at its end); prepare the data with a larger --val-fraction or corpus, or shorten "
           "model.seq_len",
           dataset.val->path().string(), dataset.val->size(), cfg.model.seq_len + 1);
  return dataset;
}

// The run's memory per process, refused before the model is built where this machine cannot hold
// it for all of the job's processes on it.
RunMemory fitting_run_memory(const RunConfig& cfg, dist::Communicator* world) {
  const RunMemory run_memory = run_memory_of(cfg);
  check_memory_fits(cfg, run_memory, processes_on_this_machine(world), available_memory_bytes(),
                    host::resident_set().now);
  return run_memory;
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

RunStart::RunStart(RunConfig& config, dist::Communicator* world_comm, TrainResult& run_result)
    : cfg(config),
      world(world_comm),
      result(run_result),
      mesh(make_mesh(cfg, world)),
      rank(mesh ? mesh->dp().rank() : 0),
      ranks(mesh ? mesh->dp().size() : 1),
      world_size(world ? world->size() : 1),
      leader(world == nullptr || world->rank() == 0),
      run_start(Clock::now()),
      dataset(open_checked_dataset(cfg)),
      run_memory(fitting_run_memory(cfg, world)),
      T(cfg.model.seq_len),
      micro(cfg.train.micro_batch_size),
      accumulation(cfg.accumulation_steps()),
      loader(dataset.train, {T, cfg.train.batch_size, cfg.train.seed, true}),
      checkpoints((fs::path(cfg.train.out_dir) / "checkpoints").string(), cfg.checkpoint.keep) {
  choose_where_to_start();
  if (nothing_to_do) return;
  check_resumed_config();
  if (leader) write_file_atomically(folder->config_path(), to_toml(cfg));
}

void RunStart::choose_where_to_start() {
  if (leader) {
    folder.emplace(cfg.train.out_dir);
    resume_path = choose_start(cfg, *folder, checkpoints, start_note);
  }
  resume_path = broadcast_string(world, resume_path);
  result.run_dir = cfg.train.out_dir;
  result.metrics_path = (fs::path(cfg.train.out_dir) / "metrics.jsonl").string();
  result.chart_path = (fs::path(cfg.train.out_dir) / "loss.svg").string();
}

void RunStart::check_resumed_config() {
  if (resume_path.empty()) return;
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
    nothing_to_do = true;
    return;
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

}  // namespace tessera::train
