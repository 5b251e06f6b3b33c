#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kTokenizerFile = "tokenizer.model";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLatestFile = "latest";

std::string step_folder_name(int64_t step) { return fmt::format("step_{:08d}", step); }

nlohmann::json model_json(const config::ModelConfig& m) {
  return {{"arch", config::architecture_name(m.arch)}, {"n_layer", m.n_layer},   {"n_head", m.n_head},
          {"n_embd", m.n_embd},                         {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len},
          {"ffn_hidden", m.ffn()},                      {"bias", m.bias},          {"tied_embeddings", m.tied_embeddings}};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

uint64_t file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot read '{}' to checksum it", path);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_64bits_update(state, buffer.data(), static_cast<size_t>(in.gcount()));
  }
  uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

CheckpointStore::CheckpointStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  TS_CHECK(keep_ >= 1, "checkpoint.keep must be at least 1, got {}", keep_);
}

namespace {

std::string shard_file_name(int rank) { return fmt::format("zero_shard.rank{:05d}.safetensors", rank); }

int rank_in(dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }
int size_of(dist::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }

void barrier(dist::Communicator* comm) {
  if (comm != nullptr && comm->size() > 1) comm->barrier()->wait();
}

// Without ZeRO: every moment by parameter name, so the file reads like the model file.
void write_optimizer(const std::string& path, const ModelState& model) {
  io::SafeTensorsWriter opt;
  optim::StateDict state = model.optimizer->state_dict();
  const Tensor& m = state.at("m");
  const Tensor& v = state.at("v");
  for (const auto& p : model.params.all()) {
    const auto begin = static_cast<int64_t>(p.offset);
    opt.add("m." + p.name, m.slice(0, begin, begin + p.numel()).reshape(p.shape));
    opt.add("v." + p.name, v.slice(0, begin, begin + p.numel()).reshape(p.shape));
  }
  opt.write(path);
}

// With ZeRO: this rank's flat range of the moments, and the range itself to check on load.
void write_shard(const std::string& path, const ModelState& model, int rank, int ranks, int stage) {
  io::SafeTensorsWriter shard;
  optim::StateDict state = model.optimizer->state_dict();
  shard.add("m", state.at("m"));
  shard.add("v", state.at("v"));
  shard.set_metadata("format", "tessera-zero-shard");
  shard.set_metadata("begin", std::to_string(model.owned.begin));
  shard.set_metadata("end", std::to_string(model.owned.end));
  shard.set_metadata("rank", std::to_string(rank));
  shard.set_metadata("ranks", std::to_string(ranks));
  shard.set_metadata("zero_stage", std::to_string(stage));
  shard.write(path);
}

}  // namespace

std::string CheckpointStore::save(const RunConfig& config, const CheckpointState& state, const ModelState& model,
                                  const std::string& tokenizer_path, dist::Communicator* comm) const {
  TS_CHECK(model.optimizer != nullptr, "a checkpoint saves the optimizer state too");
  const int rank = rank_in(comm), ranks = size_of(comm);
  const bool sharded = config.parallel.zero_stage >= 1;
  const std::string name = step_folder_name(state.step);
  const std::string final_path = (fs::path(dir_) / name).string();
  // One temporary folder for the whole group, named after rank 0's process.
  int32_t owner = ::getpid();
  const auto tmp_of = [&](int32_t pid) { return (fs::path(dir_) / fmt::format(".tmp.{}.{}", name, pid)).string(); };
  if (rank == 0) {
    fs::create_directories(dir_);
    fs::remove_all(tmp_of(owner));
    fs::create_directories(tmp_of(owner));
  }
  // Also a barrier: the others learn the name only once rank 0 has created the folder.
  if (ranks > 1) comm->broadcast(std::span(&owner, 1), 0)->wait();
  const std::string tmp = tmp_of(owner);

  if (sharded) write_shard((fs::path(tmp) / shard_file_name(rank)).string(), model, rank, ranks, config.parallel.zero_stage);
  if (rank == 0) {
    io::SafeTensorsWriter values;
    for (const auto& p : model.params.all()) values.add(p.name, model.values.weight(p));
    values.set_metadata("format", "tessera-parameters");
    values.write((fs::path(tmp) / kModelFile).string());
    if (!sharded) write_optimizer((fs::path(tmp) / kOptimizerFile).string(), model);
    if (!tokenizer_path.empty()) {
      fs::copy_file(tokenizer_path, fs::path(tmp) / kTokenizerFile, fs::copy_options::overwrite_existing);
      sync_path(fs::path(tmp) / kTokenizerFile);
    }
  }
  barrier(comm);  // every shard is written and synced
  if (rank == 0) {
    nlohmann::json manifest = {
        {"format", "tessera-checkpoint"},
        {"version", kCheckpointFormatVersion},
        {"step", state.step},
        {"seed", state.seed},
        {"data_position", state.data_position},
        {"val_history", state.val_history},
        {"model", model_json(config.model)},
        {"parameter_count", model.params.numel()},
        {"optimizer", {{"name", std::string(model.optimizer->name())}, {"steps_taken", model.optimizer->steps_taken()}}},
        {"parallel", {{"dp", config.parallel.dp}, {"zero_stage", config.parallel.zero_stage}, {"ranks", ranks}}},
        {"config", to_toml(config)},
    };
    finalize(tmp, final_path, name, manifest);
  }
  barrier(comm);  // no rank moves on (or exits) before the checkpoint is complete
  return final_path;
}

void CheckpointStore::finalize(const std::string& tmp, const std::string& final_path, const std::string& name,
                               const nlohmann::json& manifest_base) const {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::directory_iterator(tmp)) {
    const std::string file = entry.path().filename().string();
    files[file] = {{"bytes", fs::file_size(entry.path())}, {"xxh3", fmt::format("{:016x}", file_checksum(entry.path().string()))}};
  }
  nlohmann::json manifest = manifest_base;
  manifest["files"] = files;
  // The manifest is written last: a folder without one is never taken for a checkpoint.
  write_file_atomically((fs::path(tmp) / kManifestFile).string(), manifest.dump(2));

  if (fs::exists(final_path)) {
    // A complete save of the same step exists (a rerun): swap it out, then drop it.
    const std::string old = final_path + fmt::format(".old.{}", ::getpid());
    fs::rename(final_path, old);
    fs::rename(tmp, final_path);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_path);
  }
  sync_path(dir_);
  write_file_atomically((fs::path(dir_) / kLatestFile).string(), name + "\n");
  apply_retention(final_path);
}

void CheckpointStore::apply_retention(const std::string& keep_path) const {
  std::vector<fs::path> complete;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string file = entry.path().filename().string();
    if (file.starts_with(".tmp.")) {
      // Left by a save that died; only this process saves here now.
      if (file.find(fmt::format(".{}", ::getpid())) == std::string::npos) fs::remove_all(entry.path());
      continue;
    }
    if (entry.is_directory() && file.starts_with("step_") && fs::exists(entry.path() / kManifestFile)) {
      complete.push_back(entry.path());
    }
  }
  std::sort(complete.begin(), complete.end());
  const auto keep = static_cast<size_t>(keep_);
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    if (complete[i].string() != keep_path) fs::remove_all(complete[i]);
  }
}

std::optional<std::string> CheckpointStore::latest() const {
  const fs::path pointer = fs::path(dir_) / kLatestFile;
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_text(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  TS_CHECK(!name.empty() && name.find('/') == std::string::npos, "the checkpoint pointer '{}' is corrupt",
           pointer.string());
  return (fs::path(dir_) / name).string();
}

nlohmann::json read_checkpoint_manifest(const std::string& path) {
  const fs::path manifest_path = fs::path(path) / kManifestFile;
  TS_CHECK(fs::is_directory(path), "checkpoint '{}' does not exist", path);
  TS_CHECK(fs::exists(manifest_path),
           "'{}' is not a complete checkpoint: it has no {} (a save that did not finish?)", path, kManifestFile);
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text(manifest_path.string()));
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("checkpoint manifest '{}' is corrupt: {}", manifest_path.string(), e.what());
  }
  TS_CHECK(manifest.is_object() && manifest.value("format", "") == "tessera-checkpoint",
           "'{}' is not a tessera checkpoint manifest", manifest_path.string());
  TS_CHECK(manifest.value("version", 0) == kCheckpointFormatVersion,
           "checkpoint '{}' has format version {}, this tessera reads version {}", path, manifest.value("version", 0),
           kCheckpointFormatVersion);
  try {
    for (const auto& [file, info] : manifest.at("files").items()) {
      const fs::path fp = fs::path(path) / file;
      TS_CHECK(fs::exists(fp), "checkpoint '{}' is missing its file '{}'", path, file);
      TS_CHECK(fs::file_size(fp) == info.at("bytes").get<uint64_t>(),
               "checkpoint file '{}' has {} bytes, its manifest says {}: the file is truncated or replaced",
               fp.string(), fs::file_size(fp), info.at("bytes").get<uint64_t>());
      const std::string sum = fmt::format("{:016x}", file_checksum(fp.string()));
      TS_CHECK(sum == info.at("xxh3").get<std::string>(),
               "checkpoint file '{}' is corrupt: checksum {} differs from the manifest's {}", fp.string(), sum,
               info.at("xxh3").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("checkpoint manifest '{}' is malformed: {}", manifest_path.string(), e.what());
  }
  return manifest;
}

namespace {

void load_shard(const std::string& path, const nlohmann::json& manifest, const ModelState& model,
                optim::StateDict& state, int rank, int ranks) {
  const std::string file = (fs::path(path) / shard_file_name(rank)).string();
  TS_CHECK(manifest.at("files").contains(shard_file_name(rank)),
           "checkpoint '{}' has no ZeRO shard for rank {} ({}): it was saved by another layout", path, rank,
           shard_file_name(rank));
  io::SafeTensorsFile shard = io::SafeTensorsFile::open(file);
  const nn::ParamRange owned = model.owned;
  const std::string begin = shard.metadata_value("begin"), end = shard.metadata_value("end");
  TS_CHECK(begin == std::to_string(owned.begin) && end == std::to_string(owned.end) &&
               shard.metadata_value("ranks") == std::to_string(ranks),
           "checkpoint shard '{}' holds elements [{}, {}) of a group of {}, but this rank owns [{}, {}) of a group of "
           "{}; resharding is not supported yet: resume with the layout it was saved with",
           file, begin, end, shard.metadata_value("ranks"), owned.begin, owned.end, ranks);
  shard.copy_to("m", state.at("m"));
  shard.copy_to("v", state.at("v"));
}

void load_optimizer(const std::string& path, const ModelState& model, optim::StateDict& state) {
  io::SafeTensorsFile opt = io::SafeTensorsFile::open((fs::path(path) / kOptimizerFile).string());
  for (const auto& p : model.params.all()) {
    const auto begin = static_cast<int64_t>(p.offset);
    Tensor m = state.at("m").slice(0, begin, begin + p.numel()).reshape(p.shape);
    Tensor v = state.at("v").slice(0, begin, begin + p.numel()).reshape(p.shape);
    opt.copy_to("m." + p.name, m);
    opt.copy_to("v." + p.name, v);
  }
}

}  // namespace

namespace {

// "model.n_layer: checkpoint 4 vs config 6; ..." for every key of the model's shape that differs.
std::string model_differences(const nlohmann::json& manifest, const config::ModelConfig& model) {
  const nlohmann::json expected = model_json(model);
  const nlohmann::json& saved = manifest.at("model");
  std::string differences;
  for (const auto& [key, value] : expected.items()) {
    if (!saved.contains(key) || saved.at(key) != value) {
      differences += fmt::format("{}model.{}: checkpoint {} vs config {}", differences.empty() ? "" : "; ", key,
                                 saved.contains(key) ? saved.at(key).dump() : "missing", value.dump());
    }
  }
  return differences;
}

void load_parameters(const std::string& path, const ModelState& model) {
  io::SafeTensorsFile values = io::SafeTensorsFile::open((fs::path(path) / kModelFile).string());
  for (const auto& p : model.params.all()) {
    TS_CHECK(values.has(p.name), "checkpoint '{}' has no parameter '{}'", path, p.name);
    Tensor value = model.values.weight(p);
    values.copy_to(p.name, value);
  }
}

bool is_complete_step(const fs::path& dir) {
  return fs::is_directory(dir) && dir.filename().string().starts_with("step_") && fs::exists(dir / kManifestFile);
}

// The checkpoint a checkpoints/ folder stands for: the one `latest` names, or without that pointer
// (lost, or a copy that left it behind) the newest complete step folder.
std::optional<std::string> checkpoint_in(const fs::path& dir) {
  if (fs::exists(dir / kLatestFile)) return CheckpointStore(dir.string(), 1).latest();
  std::optional<fs::path> newest;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (is_complete_step(entry.path()) && (!newest || entry.path().filename() > newest->filename())) {
      newest = entry.path();
    }
  }
  if (!newest) return std::nullopt;
  return newest->string();
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  TS_CHECK(!path.empty(), "no checkpoint given: name a run folder, its checkpoints/ folder or a step folder");
  const fs::path p(path);
  TS_CHECK(fs::exists(p), "checkpoint '{}' does not exist: name a run folder, its checkpoints/ folder or a step folder",
           path);
  TS_CHECK(fs::is_directory(p), "checkpoint '{}' is a file: name a run folder, its checkpoints/ folder or a step folder",
           path);
  if (fs::exists(p / kManifestFile)) return path;
  fs::path named = p.lexically_normal();
  if (!named.has_filename()) named = named.parent_path();  // "step_00000010/"
  TS_CHECK(!named.filename().string().starts_with("step_") && !fs::exists(p / kModelFile),
           "'{}' is not a complete checkpoint: it has no {} (a save that did not finish?); name a complete step "
           "folder, or the run folder for its latest checkpoint",
           path, kManifestFile);
  for (const fs::path& dir : {p, p / "checkpoints"}) {
    if (!fs::is_directory(dir)) continue;
    if (std::optional<std::string> found = checkpoint_in(dir)) return *found;
  }
  TS_FAIL("'{}' holds no checkpoint: it is not a step folder (no {}), and neither it nor a checkpoints/ folder in it "
          "holds a complete step_* checkpoint; train with checkpoints first, or name a step folder",
          path, kManifestFile);
}

LoadedWeights load_weights(const std::string& checkpoint, const config::ModelConfig& model, const ModelState& state) {
  LoadedWeights loaded;
  loaded.path = resolve_checkpoint(checkpoint);
  loaded.manifest = read_checkpoint_manifest(loaded.path);
  try {
    const std::string differences = model_differences(loaded.manifest, model);
    if (!differences.empty()) {
      const nlohmann::json& saved = loaded.manifest.at("model");
      std::string fix = "set those model keys to the checkpoint's values";
      if (saved.value("vocab_size", -1) != model.vocab_size) {
        fix = fmt::format(
            "the vocabulary differs: the data must be tokenized with the checkpoint's tokenizer. Prepare it with "
            "`tessera data prepare --tokenizer {}/tokenizer.model ...` (model.vocab_size then follows), or set "
            "model.vocab_size = {} if every id of your data is below it; then set any other key listed to the "
            "checkpoint's value",
            loaded.path, saved.value("vocab_size", -1));
      }
      TS_FAIL("checkpoint '{}' holds a model of another shape than this run's ({}); starting from its weights needs "
              "the same model: {}",
              loaded.path, differences, fix);
    }
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("checkpoint manifest of '{}' is malformed: {}", loaded.path, e.what());
  }
  load_parameters(loaded.path, state);
  if (fs::exists(fs::path(loaded.path) / kTokenizerFile)) {
    loaded.tokenizer_path = (fs::path(loaded.path) / kTokenizerFile).string();
  }
  return loaded;
}

LoadedCheckpoint load_checkpoint(const std::string& path, const RunConfig& config, const ModelState& model,
                                 dist::Communicator* comm) {
  nlohmann::json manifest = read_checkpoint_manifest(path);
  const std::string differences = model_differences(manifest, config.model);
  TS_CHECK(differences.empty(), "checkpoint '{}' was saved by a different model shape ({}); resume with the config it "
           "was saved with, or start a new run", path, differences);
  const int saved_dp = manifest.at("parallel").value("dp", 1);
  TS_CHECK(saved_dp == config.parallel.dp,
           "checkpoint '{}' was saved with parallel.dp = {} but this run has parallel.dp = {}; resharding across "
           "data-parallel sizes is not supported yet: resume with parallel.dp = {}",
           path, saved_dp, config.parallel.dp, saved_dp);
  const int saved_stage = manifest.at("parallel").value("zero_stage", 0);
  TS_CHECK(saved_stage == config.parallel.zero_stage,
           "checkpoint '{}' was saved with parallel.zero_stage = {} but this run has parallel.zero_stage = {}; "
           "resharding across ZeRO stages is not supported yet: resume with parallel.zero_stage = {}",
           path, saved_stage, config.parallel.zero_stage, saved_stage);

  load_parameters(path, model);
  if (model.optimizer != nullptr) {
    // The state dict's tensors are views of the optimizer's storage: loading into them loads it.
    optim::StateDict state = model.optimizer->state_dict();
    if (saved_stage >= 1) {
      load_shard(path, manifest, model, state, rank_in(comm), size_of(comm));
    } else {
      load_optimizer(path, model, state);
    }
    state.steps = manifest.at("optimizer").at("steps_taken").get<int64_t>();
    model.optimizer->load_state_dict(state);
  }
  LoadedCheckpoint loaded;
  loaded.path = path;
  loaded.state.step = manifest.at("step").get<int64_t>();
  loaded.state.seed = manifest.at("seed").get<uint64_t>();
  loaded.state.data_position = manifest.at("data_position");
  loaded.state.val_history = manifest.value("val_history", std::vector<double>{});
  loaded.config_toml = manifest.at("config").get<std::string>();
  return loaded;
}

}  // namespace tessera::train
