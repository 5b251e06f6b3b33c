#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/model_config.h"
#include "core/atomic_file.h"
#include "io/safetensors.h"
#include "parallel/tensor_parallel.h"
#include "train/hf_import.h"
#include "train/optimizer_shards.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

constexpr const char* kModelFile = kCheckpointModelFile;
constexpr const char* kTokenizerFile = kCheckpointTokenizerFile;
constexpr const char* kManifestFile = kCheckpointManifestFile;
constexpr const char* kLatestFile = "latest";

std::string step_folder_name(int64_t step) { return fmt::format("step_{:08d}", step); }

nlohmann::json model_json(const config::ModelConfig& m) {
  return {{"arch", config::architecture_name(m.arch)}, {"n_layer", m.n_layer},   {"n_head", m.n_head},
          {"n_kv_head", m.kv_heads()},                  {"n_embd", m.n_embd},                         {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len},
          {"ffn_hidden", m.ffn()},                      {"bias", m.bias},          {"tied_embeddings", m.tied_embeddings},
          {"activation", config::activation_name(m.mlp_activation())}};
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

std::string shard_file_name(int rank) { return zero_shard_file_name(rank); }

int rank_in(dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }
int size_of(dist::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }

void barrier(dist::Communicator* comm) {
  if (comm != nullptr && comm->size() > 1) comm->barrier()->wait();
}

// The parameters of `model`'s optimizer segments when it holds them whole (without ZeRO): the
// whole store, or under pipelining its stages' parameters.
std::vector<const nn::Parameter*> whole_parameters_of(const ModelState& model) {
  if (model.pipeline_rank >= 0) return model.stage_params;
  std::vector<const nn::Parameter*> out;
  for (const auto& p : model.params.all()) out.push_back(&p);
  return out;
}

// Each of the optimizer's state tensors split by parameter: `visit(key, part)` for every
// non-empty part, keyed "<tensor>.<parameter>" ("m.<name>", "row.<name>", ...) and shaped like
// the parameter when it holds one value per element, flat otherwise (per-tensor statistics).
template <class Visit>
void for_each_state_part(const ModelState& model, optim::StateDict& state, Visit visit) {
  const std::vector<const nn::Parameter*> params = whole_parameters_of(model);
  std::vector<int64_t> offsets{0};
  for (const nn::Parameter* p : params) offsets.push_back(offsets.back() + p->numel());
  TS_CHECK(offsets.back() == model.optimizer->owned_elements(),
           "the optimizer holds {} elements but the parameters it is saved by hold {}",
           model.optimizer->owned_elements(), offsets.back());
  for (size_t i = 0; i < params.size(); ++i) {
    const nn::Parameter& p = *params[i];
    for (const optim::StateTensor& t : state.tensors) {
      Tensor part = optim::StateDict::part(t, i, offsets);
      if (part.numel() == 0) continue;
      visit(t.name + "." + p.name, part.numel() == p.numel() ? part.reshape(p.shape) : part);
    }
  }
}

// Without ZeRO: the file of this rank's optimizer state.
std::string optimizer_file_of(const ModelState& model) {
  return optimizer_file_name(model.pipeline_rank, model.tensor_parallel_rank());
}

// The whole value of every parameter (row-major [p.spec.unpadded_shape()]), gathered from the
// tensor-parallel blocks and the expert-parallel stacks (collective over those groups).
std::vector<std::vector<float>> whole_parameters(const ModelState& model) {
  std::vector<std::vector<float>> out;
  for (const auto& p : model.params.all()) {
    const Tensor block = model.values.weight(p);
    const bool expert_stack = !p.spec.replicated_over(config::MeshDim::EP);
    out.push_back(parallel::gather_parameter(expert_stack ? model.expert_parallel : model.tensor_parallel, p,
                                             std::span(block.data<float>(), static_cast<size_t>(p.numel())),
                                             expert_stack ? config::MeshDim::EP : config::MeshDim::TP));
  }
  return out;
}

// A rank's own state tensors, and the step it has reached (a compressor's random rounding is keyed
// by it).
void write_compression_state(const std::string& path, parallel::RankLocalState& owner) {
  io::SafeTensorsWriter file;
  for (auto& [name, tensor] : owner.rank_state_tensors()) file.add(name, tensor);
  file.set_metadata("format", "tessera-compression-state");
  file.set_metadata("method", std::string(owner.rank_state_owner()));
  file.set_metadata("step", std::to_string(owner.rank_state_step()));
  file.write(path);
}

// "0-10,20-30": flat ranges as a shard file records them, to be compared on load.
std::string ranges_text(const std::vector<nn::ParamRange>& ranges) {
  std::string text;
  for (const nn::ParamRange& r : ranges) text += fmt::format("{}{}-{}", text.empty() ? "" : ",", r.begin, r.end);
  return text;
}

}  // namespace

namespace {

// Runs one part of a save. A failure (a filesystem error, a write that found the disk full or the
// folder read-only) removes the save's temporary folder and becomes one error naming the checkpoint
// and the fix; complete checkpoints are never touched on this path.
template <class Body>
void saving(const std::string& dir, const std::string& tmp, const std::string& final_path, Body&& body) {
  std::string problem;
  try {
    body();
    return;
  } catch (const fs::filesystem_error& e) {
    problem = e.code().message();
    if (!e.path1().empty()) problem += fmt::format(" ('{}'", e.path1().string());
    if (!e.path2().empty()) problem += fmt::format(" -> '{}'", e.path2().string());
    if (!e.path1().empty()) problem += ")";
  } catch (const Error& e) {
    problem = e.what();
  }
  std::error_code ignored;
  if (!tmp.empty()) fs::remove_all(tmp, ignored);
  TS_FAIL("cannot save checkpoint '{}': {}. Free disk space, make '{}' writable, or set train.out_dir to a folder "
          "that can be written; the checkpoints already saved are intact",
          final_path, problem, dir);
}

bool is_complete_checkpoint(const fs::path& folder) {
  std::error_code ec;
  return fs::is_directory(folder, ec) && fs::is_regular_file(folder / kManifestFile, ec);
}

// The last component of a folder path, also when it ends in '/'.
std::string folder_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// Complete step_<N> folders of `dir`, oldest first.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> step = step_of_folder_name(it->path().filename().string());
    if (step.has_value() && is_complete_checkpoint(it->path())) found.emplace_back(*step, it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::string CheckpointStore::save(const RunConfig& config, const CheckpointState& state, const ModelState& model,
                                  const std::string& tokenizer_path, dist::Communicator* comm) const {
  TS_CHECK(model.optimizer != nullptr, "a checkpoint saves the optimizer state too");
  const int rank = rank_in(comm), ranks = size_of(comm);
  const std::string name = step_folder_name(state.step);
  const std::string final_path = (fs::path(dir_) / name).string();
  // One temporary folder for the whole group, named after rank 0's process.
  int32_t owner = ::getpid();
  const auto tmp_of = [&](int32_t pid) { return (fs::path(dir_) / fmt::format(".tmp.{}.{}", name, pid)).string(); };
  if (rank == 0) {
    saving(dir_, tmp_of(owner), final_path, [&] {
      fs::create_directories(dir_);
      fs::remove_all(tmp_of(owner));
      fs::create_directories(tmp_of(owner));
    });
  }
  // Also a barrier: the others learn the name only once rank 0 has created the folder.
  if (ranks > 1) comm->broadcast(std::span(&owner, 1), 0)->wait();
  const std::string tmp = tmp_of(owner);

  // The model file holds whole parameters: blocks split over tp or ep are gathered first (every rank takes part).
  std::vector<std::vector<float>> gathered;
  if (model.tensor_parallel != nullptr || model.expert_parallel != nullptr) gathered = whole_parameters(model);
  // Only rank 0, which made the temporary folder, removes it; the others report their failure.
  saving(dir_, rank == 0 ? tmp : std::string(), final_path, [&] {
    write_optimizer_shard((fs::path(tmp) / optimizer_shard_file_name(rank)).string(), model, rank, ranks);
  });
  if (model.rank_state != nullptr) {
    saving(dir_, rank == 0 ? tmp : std::string(), final_path, [&] {
      write_compression_state((fs::path(tmp) / compression_state_file_name(rank)).string(), *model.rank_state);
    });
  }
  if (rank != 0 && gathered.empty() && model.values_read_together) {
    // Each parameter is gathered from every rank's shard as rank 0 writes it (in store order, the
    // file's): this rank takes part in each gather and lets the parameter go.
    saving(dir_, std::string(), final_path, [&] {
      for (const auto& p : model.params.all()) model.values.weight(p);
    });
  }
  if (rank == 0) {
    saving(dir_, tmp, final_path, [&] {
      io::SafeTensorsWriter values;
      for (const auto& p : model.params.all()) {
        if (!gathered.empty()) {
          values.add(p.name, Tensor::from_external(gathered[static_cast<size_t>(p.id)].data(), p.spec.unpadded_shape(),
                                                   DType::F32));
          continue;
        }
        // Read when the file reaches it: a model streamed from the nvme tier is then in compute
        // memory one parameter at a time, never whole. The file keeps the store's order (its items
        // are all f32), which the other ranks follow when each read is a gather.
        values.add(p.name, DType::F32, p.shape, static_cast<size_t>(p.numel()) * sizeof(float),
                   [&model, &p] { return model.values.weight(p); });
      }
      values.set_metadata("format", "tessera-parameters");
      values.write((fs::path(tmp) / kModelFile).string());
      if (!tokenizer_path.empty()) {
        fs::copy_file(tokenizer_path, fs::path(tmp) / kTokenizerFile, fs::copy_options::overwrite_existing);
        sync_path(fs::path(tmp) / kTokenizerFile);
      }
    });
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
        {"elapsed_seconds", state.elapsed_seconds},
        {"model", model_json(config.model)},
        {"parameter_count", model.params.numel()},
        {"optimizer", {{"name", std::string(model.optimizer->name())}, {"steps_taken", model.optimizer->steps_taken()}}},
        {"parallel",
         {{"dp", config.parallel.dp},
          {"zero_stage", config.parallel.zero_stage},
          {"ranks", ranks},
          {"pp", config.parallel.pp},
          {"tp", config.parallel.tp},
          {"ep", config.parallel.ep}}},
        {"config", to_toml(config)},
    };
    if (state.loss_scale) {
      manifest["loss_scale"] = {{"scale", state.loss_scale->scale},
                                {"finite_steps", state.loss_scale->finite_steps},
                                {"skipped_steps", state.loss_scale->skipped_steps}};
    }
    if (state.lr_restart) manifest["lr_restart"] = {{"step", state.lr_restart->step}, {"rate", state.lr_restart->rate}};
    saving(dir_, tmp, final_path, [&] { finalize(tmp, final_path, name, manifest); });
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
  write_file_atomically((fs::path(tmp) / kManifestFile).string(), checkpoint_manifest_text(manifest));

  if (fs::exists(final_path)) {
    // A complete save of the same step exists (a rerun): swap it out, then drop it. If the new one
    // cannot take its place, the old one goes back.
    const std::string old = final_path + fmt::format(".old.{}", ::getpid());
    fs::rename(final_path, old);
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (ec) {
      std::error_code restore_ec;
      fs::rename(old, final_path, restore_ec);
      throw fs::filesystem_error("cannot move the new checkpoint into place", tmp, final_path, ec);
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_path);
  }
  sync_path(dir_);
  write_file_atomically((fs::path(dir_) / kLatestFile).string(), name + "\n");
  apply_retention(final_path);
}

// Best effort: the new checkpoint is complete, so a folder that cannot be removed now is left for
// the next save rather than failing this one.
void CheckpointStore::apply_retention(const std::string& keep_path) const {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    // Left by a save that died; only this process saves here now.
    if (file.starts_with(".tmp.") && file.find(fmt::format(".{}", ::getpid())) == std::string::npos) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
  const std::vector<std::pair<int64_t, fs::path>> complete = complete_checkpoints(dir_);
  const auto keep = static_cast<size_t>(keep_);
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    std::error_code ignored;
    if (complete[i].second.string() != keep_path) fs::remove_all(complete[i].second, ignored);
  }
}

std::optional<std::string> CheckpointStore::latest() const {
  const fs::path pointer = fs::path(dir_) / kLatestFile;
  std::error_code ec;
  if (!fs::exists(pointer, ec)) return std::nullopt;
  std::string name = read_text(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  TS_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
           "the checkpoint pointer '{}' is corrupt", pointer.string());
  return (fs::path(dir_) / name).string();
}

std::optional<std::string> CheckpointStore::latest_complete(std::string* note) const {
  if (note != nullptr) note->clear();
  const fs::path pointer = fs::path(dir_) / kLatestFile;
  std::string why;
  std::error_code ec;
  if (fs::exists(pointer, ec)) {
    std::optional<std::string> target;
    try {
      target = latest();
    } catch (const Error& e) {
      why = e.what();
    }
    if (target.has_value()) {
      if (is_complete_checkpoint(*target)) return target;
      why = fmt::format("'{}' points at {}, which is {}", pointer.string(), *target,
                        fs::exists(*target, ec) ? "incomplete (it has no manifest.json)" : "gone");
    }
  } else {
    why = fmt::format("'{}' has no 'latest' pointer", dir_);
  }
  const std::vector<std::pair<int64_t, fs::path>> complete = complete_checkpoints(dir_);
  if (complete.empty()) return std::nullopt;
  const std::string newest = complete.back().second.string();
  if (note != nullptr) *note = fmt::format("{}; using the newest complete checkpoint, {}", why, newest);
  return newest;
}

std::string resolve_checkpoint(const std::string& given, const std::string& run_checkpoints_dir, std::string* note) {
  if (note != nullptr) note->clear();
  TS_CHECK(!given.empty(), "no checkpoint given: name a checkpoint folder (step_...), a run folder or its checkpoints/ "
           "folder");
  if (given == "latest") {
    TS_CHECK(!run_checkpoints_dir.empty(), "\"latest\" names the newest checkpoint of this run, and there is no run "
             "here: give a run folder, its checkpoints/ folder or a checkpoint folder instead");
    std::optional<std::string> found = CheckpointStore(run_checkpoints_dir, 1).latest_complete(note);
    TS_CHECK(found.has_value(), "checkpoint.resume = \"latest\" but '{}' holds no complete checkpoint; start without it, or use "
             "checkpoint.resume = \"auto\" to start fresh when there is none",
             run_checkpoints_dir);
    return *found;
  }
  const fs::path p(given);
  std::error_code ec;
  TS_CHECK(fs::exists(p, ec), "checkpoint '{}' does not exist; give a checkpoint folder (step_...), a run folder or its "
           "checkpoints/ folder", given);
  TS_CHECK(fs::is_directory(p, ec), "checkpoint '{}' is not a folder; give a checkpoint folder (step_...), a run folder "
           "or its checkpoints/ folder", given);
  // A checkpoint folder itself; read_checkpoint_manifest says so if it never got its manifest.
  if (fs::exists(p / kManifestFile, ec) || step_of_folder_name(folder_name(given)).has_value()) return given;
  std::string dir;
  if (fs::is_directory(p / "checkpoints", ec)) {
    dir = (p / "checkpoints").string();
  } else if (fs::exists(p / kLatestFile, ec) || !complete_checkpoints(given).empty()) {
    dir = given;
  } else {
    TS_FAIL("'{}' is not a checkpoint: it is neither a checkpoint folder (no {}), a run folder (no checkpoints/) nor a "
            "run's checkpoints/ folder (no step_* folders); give one of those",
            given, kManifestFile);
  }
  std::optional<std::string> found = CheckpointStore(dir, 1).latest_complete(note);
  TS_CHECK(found.has_value(), "'{}' holds no complete checkpoint (only saves that never finished, if any); give "
           "another checkpoint or start without one", dir);
  return *found;
}

CheckpointManifest read_checkpoint_manifest(const std::string& path) {
  const fs::path manifest_path = fs::path(path) / kManifestFile;
  std::error_code ec;
  TS_CHECK(fs::is_directory(path, ec), "checkpoint '{}' does not exist", path);
  TS_CHECK(fs::is_regular_file(manifest_path, ec),
           "'{}' is not a complete checkpoint: it has no {} (a save that did not finish?)", path, kManifestFile);
  // Far above any real manifest (the config and one number per evaluation), so a damaged or
  // foreign file cannot make the reader swallow gigabytes.
  constexpr uintmax_t kMaxManifestBytes = 64u << 20;
  const uintmax_t size = fs::file_size(manifest_path, ec);
  TS_CHECK(!ec && size <= kMaxManifestBytes, "checkpoint manifest '{}' is {} bytes, more than any manifest ({} at most); "
           "the checkpoint is damaged: resume from another one", manifest_path.string(), size, kMaxManifestBytes);
  CheckpointManifest manifest = parse_checkpoint_manifest(read_text(manifest_path.string()), manifest_path.string(),
                                                          step_of_folder_name(folder_name(path)));
  for (const auto& [file, info] : manifest.files) {
    const fs::path fp = fs::path(path) / file;
    TS_CHECK(fs::is_regular_file(fp, ec), "checkpoint '{}' is missing its file '{}'", path, file);
    const uintmax_t bytes = fs::file_size(fp, ec);
    TS_CHECK(!ec && bytes == info.bytes,
             "checkpoint file '{}' has {} bytes, its manifest says {}: the file is truncated or replaced", fp.string(),
             bytes, info.bytes);
    const std::string sum = fmt::format("{:016x}", file_checksum(fp.string()));
    TS_CHECK(sum == info.xxh3, "checkpoint file '{}' is corrupt: checksum {} differs from the manifest's {}", fp.string(),
             sum, info.xxh3);
  }
  return manifest;
}

RunConfig checkpoint_run_config(const CheckpointManifest& manifest, const std::string& path) {
  const std::string source = (fs::path(path) / kManifestFile).string();
  try {
    return read_run_config(config::parse_toml_text(manifest.config_toml, source + " (field 'config')"));
  } catch (const Error& e) {
    TS_FAIL("checkpoint manifest '{}': field 'config' is not a valid run config: {}; the checkpoint is damaged: resume "
            "from another checkpoint or start anew", source, e.what());
  }
}

namespace {

void load_shard(const std::string& path, const CheckpointManifest& manifest, const ModelState& model,
                optim::StateDict& state, int rank, int ranks) {
  const std::string file = (fs::path(path) / shard_file_name(rank)).string();
  TS_CHECK(manifest.files.contains(shard_file_name(rank)),
           "checkpoint '{}' has no ZeRO shard for rank {} ({}): it was saved by another layout", path, rank,
           shard_file_name(rank));
  io::SafeTensorsFile shard = io::SafeTensorsFile::open(file);
  // Shards written before a shard could be several ranges record begin and end only.
  const bool ranged = shard.metadata().contains("ranges");
  const std::string saved = ranged ? shard.metadata_value("ranges")
                                   : shard.metadata_value("begin") + "-" + shard.metadata_value("end");
  const std::string mine = ranges_text(model.owned);
  TS_CHECK(saved == mine && shard.metadata_value("ranks") == std::to_string(ranks),
           "checkpoint shard '{}' holds elements {} of a group of {}, but this rank owns {} of a group of {}; "
           "resharding is not supported yet: resume with the layout it was saved with",
           file, saved, shard.metadata_value("ranks"), mine, ranks);
  for (optim::StateTensor& t : state.tensors) shard.copy_to(t.name, t.values);
}

// The optimizer state by parameter name (without ZeRO): optimizer.safetensors, or under
// pipelining this stage's file.
void load_optimizer(const std::string& path, const CheckpointManifest& manifest, const ModelState& model,
                    optim::StateDict& state) {
  const std::string name = optimizer_file_of(model);
  TS_CHECK(manifest.files.contains(name),
           "checkpoint '{}' has no optimizer state for pipeline rank {} and tensor-parallel rank {} ({}): it was saved "
           "by another layout", path, model.pipeline_rank, model.tensor_parallel_rank(), name);
  io::SafeTensorsFile opt = io::SafeTensorsFile::open((fs::path(path) / name).string());
  for_each_state_part(model, state, [&](const std::string& key, Tensor part) { opt.copy_to(key, part); });
}

void load_compression_state(const std::string& path, const CheckpointManifest& manifest,
                            parallel::RankLocalState& owner, int rank) {
  const std::string name = compression_state_file_name(rank);
  TS_CHECK(manifest.files.contains(name), "checkpoint '{}' has no per-rank state of '{}' for rank {} ({}): it was "
           "saved by a run without it (another parallel.compression or optim.name); resume with the settings it was "
           "saved with, or start anew from its weights with train.init_from",
           path, owner.rank_state_owner(), rank, name);
  io::SafeTensorsFile file = io::SafeTensorsFile::open((fs::path(path) / name).string());
  TS_CHECK(file.metadata_value("method") == owner.rank_state_owner(), "checkpoint '{}' holds the state of '{}', "
           "but this run uses '{}'", path, file.metadata_value("method"), owner.rank_state_owner());
  for (auto& [key, tensor] : owner.rank_state_tensors()) file.copy_to(key, tensor);
  owner.set_rank_state_step(std::stoll(file.metadata_value("step")));
}

}  // namespace

namespace {

// "model.n_layer: checkpoint 4 vs config 6; ..." for every key of the model's shape that differs.
std::string model_differences(const CheckpointManifest& manifest, const config::ModelConfig& model) {
  const nlohmann::json expected = model_json(model);
  nlohmann::json saved = manifest.model;
  // Checkpoints from before grouped-query attention have no n_kv_head: theirs equals n_head.
  if (!saved.contains("n_kv_head") && saved.contains("n_head")) saved["n_kv_head"] = saved["n_head"];
  // Checkpoints from before model.activation have their architecture's MLP.
  if (!saved.contains("activation") && saved.contains("arch")) {
    saved["activation"] = config::activation_name(config::default_activation(
        saved["arch"] == "llama" ? config::Architecture::Llama : config::Architecture::Gpt2));
  }
  std::string differences;
  for (const auto& [key, value] : expected.items()) {
    if (!saved.contains(key) || saved.at(key) != value) {
      differences += fmt::format("{}model.{}: checkpoint {} vs config {}", differences.empty() ? "" : "; ", key,
                                 saved.contains(key) ? saved.at(key).dump() : "missing", value.dump());
    }
  }
  return differences;
}

// Writes parameter `p` through the model's sink: `fill` writes its value into the tensor it is
// given ([p.shape]), which is then put back.
template <class Fill>
void write_parameter(const ModelState& model, const nn::Parameter& p, Fill fill) {
  nn::InPlaceSink in_place(model.values);
  nn::ParameterSink& sink = model.sink != nullptr ? *model.sink : in_place;
  Tensor value = sink.take(p);
  fill(value);
  sink.put(p);
}

// The model file holds whole parameters; a rank that holds blocks of them (tensor parallelism)
// cuts its block out, its padding rows zero. One parameter at a time: the file is mapped, and the
// sink may hold nothing but the parameter it is given.
void load_parameters(const std::string& path, const ModelState& model) {
  io::SafeTensorsFile values = io::SafeTensorsFile::open((fs::path(path) / kModelFile).string());
  for (const auto& p : model.params.all()) {
    TS_CHECK(values.has(p.name), "checkpoint '{}' has no parameter '{}'", path, p.name);
    if (p.spec.splits.empty() && p.spec.padding_rows == 0) {
      write_parameter(model, p, [&](Tensor& value) { values.copy_to(p.name, value); });
      continue;
    }
    std::vector<float> storage(static_cast<size_t>(shape_numel(p.spec.unpadded_shape())));
    Tensor whole = Tensor::from_external(storage.data(), p.spec.unpadded_shape(), DType::F32);
    values.copy_to(p.name, whole);
    set_parameter_from_whole(model, p, whole);
  }
}

}  // namespace

void set_parameter_from_whole(const ModelState& model, const nn::Parameter& p, const Tensor& whole) {
  TS_CHECK(whole.dtype() == DType::F32 && whole.is_contiguous() && whole.shape() == p.spec.unpadded_shape(),
           "parameter '{}' is set from a tensor of shape {}, not its whole shape {}", p.name, whole.shape_string(),
           shape_to_string(p.spec.unpadded_shape()));
  const float* from = whole.data<float>();
  write_parameter(model, p, [&](Tensor& value) {
    float* into = value.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      const int64_t g = p.spec.global_index(i);
      into[i] = p.spec.is_padding(g) ? 0.0f : from[g];
    }
  });
}

LoadedWeights load_weights(const std::string& checkpoint, const config::ModelConfig& model, const ModelState& state) {
  if (is_hf_folder(checkpoint)) return load_hf_weights(checkpoint, model, state);
  LoadedWeights loaded;
  loaded.path = resolve_checkpoint(checkpoint, "", &loaded.note);
  loaded.manifest = read_checkpoint_manifest(loaded.path);
  try {
    const std::string differences = model_differences(loaded.manifest, model);
    if (!differences.empty()) {
      const nlohmann::json& saved = loaded.manifest.model;
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

namespace {

// "parallel.dp = 2, parallel.zero_stage = 1, parallel.tp = 2, parallel.pp = 2 (8 ranks)": the keys
// that decide which elements a rank holds, for the errors that refuse a move between layouts.
std::string layout_text(const ParallelSection& p, int ranks) {
  std::string text = fmt::format("parallel.dp = {}, parallel.zero_stage = {}, parallel.tp = {}, parallel.pp = {}", p.dp,
                                 p.zero_stage, p.tp, p.pp);
  if (p.virtual_stages > 1) text += fmt::format(", parallel.virtual_stages = {}", p.virtual_stages);
  if (!p.stage_layers.empty()) text += fmt::format(", parallel.stage_layers = [{}]", fmt::join(p.stage_layers, ", "));
  if (p.ep > 1) text += fmt::format(", parallel.ep = {}", p.ep);
  return text + fmt::format(" ({} rank{})", ranks, ranks == 1 ? "" : "s");
}

// Formats 1 and 2 keep the optimizer state in files per layout: they load on the layout that saved them.
void check_saved_layout(const std::string& path, const CheckpointManifest& manifest, const RunConfig& config) {
  const auto same = [&](const char* key, int saved, int now) {
    TS_CHECK(saved == now,
             "checkpoint '{}' (format {}) was saved with parallel.{} = {} but this run has parallel.{} = {}; checkpoints "
             "of that format keep the optimizer state in files per layout: resume with parallel.{} = {} (its weights "
             "alone load under any layout with train.init_from; checkpoints saved now move between layouts)",
             path, manifest.version, key, saved, key, now, key, saved);
  };
  same("dp", manifest.dp, config.parallel.dp);
  same("zero_stage", manifest.zero_stage, config.parallel.zero_stage);
  same("tp", manifest.tp, config.parallel.tp);
  same("pp", manifest.pp, config.parallel.pp);
}

// Formats 1 and 2: PipeDream-2BW's previous weight version, a file per pipeline (and tensor-parallel) rank.
void load_previous_weights(const std::string& path, const CheckpointManifest& manifest, const ModelState& model) {
  const std::string name = previous_weights_file_name(model.previous_weights_rank, model.tensor_parallel_rank());
  TS_CHECK(manifest.files.contains(name),
           "checkpoint '{}' has no previous weight version for pipeline rank {} ({}): it was saved by a schedule "
           "that flushes, and PipeDream-2BW's next batch reads the version before the newest. Resume with the "
           "schedule it was saved with, or start a new 2bw run from its weights with train.init_from",
           path, model.previous_weights_rank, name);
  io::SafeTensorsFile previous = io::SafeTensorsFile::open((fs::path(path) / name).string());
  for (const auto& [p, value] : model.previous_weights) {
    Tensor into = value;  // a view of the stash: loading into it loads the stash
    previous.copy_to(p->name, into);
  }
}

}  // namespace

std::vector<optim::Segment> ModelState::master_segments() const {
  if (!segments.empty()) return segments;
  std::vector<optim::Segment> out;
  for (const nn::ParamRange& range : owned) {
    for (const nn::Parameter& p : params.all()) {
      const auto first = static_cast<int64_t>(p.offset);
      const int64_t lo = std::max(range.begin, first), hi = std::min(range.end, first + p.numel());
      if (hi > lo) out.push_back({&p, lo - first, hi - first, nullptr, nullptr, p.spec.split_mask()});
    }
  }
  return out;
}

LoadedCheckpoint load_checkpoint(const std::string& path, const RunConfig& config, const ModelState& model,
                                 dist::Communicator* comm) {
  const CheckpointManifest manifest = read_checkpoint_manifest(path);
  const std::string differences = model_differences(manifest, config.model);
  TS_CHECK(differences.empty(), "checkpoint '{}' was saved by a different model shape ({}); resume with the config it "
           "was saved with, or start a new run", path, differences);
  TS_CHECK(model.optimizer == nullptr || manifest.optimizer_name == model.optimizer->name(),
           "checkpoint '{}' holds the state of optim.name = \"{}\" but this run has optim.name = \"{}\": resume with "
           "optim.name = \"{}\", or start a new run from its weights alone with train.init_from",
           path, manifest.optimizer_name, model.optimizer->name(), manifest.optimizer_name);
  const bool per_layout_files = manifest.version < 3;
  if (per_layout_files) check_saved_layout(path, manifest, config);
  load_parameters(path, model);
  const std::string saved_layout = layout_text(checkpoint_run_config(manifest, path).parallel, manifest.ranks);
  const std::string this_layout = layout_text(config.parallel, size_of(comm));
  bool optimizer_chunk_by_chunk = false;
  if (model.optimizer != nullptr && !per_layout_files) {
    optimizer_chunk_by_chunk = load_optimizer_shards(path, manifest, model, saved_layout, this_layout);
  } else if (model.optimizer != nullptr) {
    // The state dict's tensors are views of the optimizer's storage: loading into them loads it.
    optim::StateDict state = model.optimizer->state_dict();
    if (manifest.zero_stage >= 1) {
      load_shard(path, manifest, model, state, rank_in(comm), size_of(comm));
    } else {
      load_optimizer(path, manifest, model, state);
    }
    state.steps = manifest.optimizer_steps;
    model.optimizer->load_state_dict(state);
  }
  if (model.rank_state != nullptr) {
    TS_CHECK(saved_layout == this_layout,
             "checkpoint '{}' was saved with {} and this run has {}: the error feedback of '{}' (what each rank has not "
             "sent yet) is kept per rank and does not move between layouts. Resume with {}, or start a new run from "
             "its weights with train.init_from",
             path, saved_layout, this_layout, model.rank_state->rank_state_owner(), saved_layout);
    load_compression_state(path, manifest, *model.rank_state, rank_in(comm));
  }
  const bool has_compression_state = manifest.files.contains(compression_state_file_name(0));
  if (per_layout_files && !model.previous_weights.empty() && manifest.state.step > 0) load_previous_weights(path, manifest, model);
  LoadedCheckpoint loaded;
  loaded.path = path;
  loaded.state = manifest.state;
  if (has_compression_state && model.rank_state == nullptr) {
    loaded.unused = "its per-rank error feedback (of gradient compression or 1-bit Adam, the error not yet sent): this "
                    "run does not use it";
  }
  loaded.config_toml = manifest.config_toml;
  loaded.optimizer_chunk_by_chunk = optimizer_chunk_by_chunk;
  return loaded;
}

}  // namespace tessera::train
