#include "train/checkpoint_manifest.h"

#include <xxhash.h>

#include <cmath>
#include <limits>

#include "core/check.h"
#include "config/model_config.h"
#include "core/json_input.h"
#include "data/loader.h"

namespace tessera::train {

namespace {

using nlohmann::json;

constexpr const char* kChecksumField = "manifest_xxh3";
// Said after every problem: what a user can do about a damaged manifest.
constexpr const char* kFix = "the checkpoint is damaged or was edited: resume from another checkpoint or start anew";

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// The canonical text that manifest_xxh3 covers. The error handler keeps dump() from throwing on
// a string that is not UTF-8 (parse() refuses those, so only a manifest built in memory has one).
std::string canonical_text(const json& manifest) {
  return manifest.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A value as a message shows it: short, so a huge field cannot flood the terminal.
std::string shown(const json& value) {
  std::string text = canonical_text(value);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

bool is_hex16(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Every check names the manifest, the field (dotted: "optimizer.steps_taken") and what is wrong.
class Fields {
 public:
  explicit Fields(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    TS_FAIL("checkpoint manifest '{}': field '{}' {}; {}", source_, field, problem, kFix);
  }

  const json& get(const json& parent, const std::string& prefix, const char* key) const {
    const std::string name = dotted(prefix, key);
    if (!parent.contains(key)) fail(name, "is missing");
    const json& value = parent.at(key);
    if (value.is_null()) fail(name, "is null");
    return value;
  }
  const json& object(const json& parent, const std::string& prefix, const char* key) const {
    const json& v = get(parent, prefix, key);
    if (!v.is_object()) fail(dotted(prefix, key), fmt::format("must be an object, got {}", shown(v)));
    return v;
  }
  // An integer in [lo, hi]; a float such as 3.0 is refused like any other non-integer.
  int64_t integer(const json& parent, const std::string& prefix, const char* key, int64_t lo, int64_t hi,
                  const char* what) const {
    const json& v = get(parent, prefix, key);
    bool in_range = false;
    if (v.is_number_unsigned()) {
      in_range = hi >= 0 && v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                 (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo));
    } else if (v.is_number_integer()) {
      in_range = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    }
    if (!in_range) fail(dotted(prefix, key), fmt::format("must be {}, got {}", what, shown(v)));
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const json& parent, const std::string& prefix, const char* key) const {
    const json& v = get(parent, prefix, key);
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    if (!ok) fail(dotted(prefix, key), fmt::format("must be an unsigned integer, got {}", shown(v)));
    return v.get<uint64_t>();
  }
  std::string string(const json& parent, const std::string& prefix, const char* key) const {
    const json& v = get(parent, prefix, key);
    if (!v.is_string()) fail(dotted(prefix, key), fmt::format("must be a string, got {}", shown(v)));
    return v.get<std::string>();
  }
  bool boolean(const json& parent, const std::string& prefix, const char* key) const {
    const json& v = get(parent, prefix, key);
    if (!v.is_boolean()) fail(dotted(prefix, key), fmt::format("must be true or false, got {}", shown(v)));
    return v.get<bool>();
  }

  static std::string dotted(const std::string& prefix, const char* key) {
    return prefix.empty() ? std::string(key) : prefix + "." + key;
  }

 private:
  const std::string& source_;
};

// Model keys as model_json() in checkpoint.cpp writes them; load_checkpoint compares their values
// with the config, so here only their types and ranges are checked.
void check_model(const Fields& f, const json& model) {
  const std::string arch = f.string(model, "model", "arch");
  if (arch != "gpt2" && arch != "llama") f.fail("model.arch", fmt::format("must be \"gpt2\" or \"llama\", got \"{}\"", arch));
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "seq_len", "ffn_hidden"}) {
    f.integer(model, "model", key, 1, kIntMax, "a positive integer");
  }
  // Written since grouped-query attention; older manifests have as many key/value heads as heads.
  if (model.contains("n_kv_head")) f.integer(model, "model", "n_kv_head", 1, kIntMax, "a positive integer");
  f.boolean(model, "model", "bias");
  f.boolean(model, "model", "tied_embeddings");
  // Written since model.activation; older manifests have their architecture's MLP.
  if (model.contains("activation")) {
    const std::string name = f.string(model, "model", "activation");
    if (!config::activation_of_name(name)) {
      f.fail("model.activation", fmt::format("must be an activation tessera knows, got \"{}\"", name));
    }
  }
}

}  // namespace

std::string optimizer_shard_file_name(int rank) { return fmt::format("optimizer.rank{:05d}.safetensors", rank); }

std::string zero_shard_file_name(int rank) { return fmt::format("zero_shard.rank{:05d}.safetensors", rank); }

std::string compression_state_file_name(int rank) {
  return fmt::format("compression.rank{:05d}.safetensors", rank);
}

std::string pipeline_stage_file_name(int pipeline_rank) { return optimizer_file_name(pipeline_rank, -1); }

namespace {
std::string tensor_parallel_part(int tensor_parallel_rank) {
  return tensor_parallel_rank >= 0 ? fmt::format(".tp{:04d}", tensor_parallel_rank) : std::string();
}
}  // namespace

std::string optimizer_file_name(int pipeline_rank, int tensor_parallel_rank) {
  const std::string pipeline = pipeline_rank >= 0 ? fmt::format(".pipeline{:04d}", pipeline_rank) : std::string();
  return fmt::format("optimizer{}{}.safetensors", pipeline, tensor_parallel_part(tensor_parallel_rank));
}

std::string previous_weights_file_name(int pipeline_rank, int tensor_parallel_rank) {
  return fmt::format("previous_weights.pipeline{:04d}{}.safetensors", pipeline_rank,
                     tensor_parallel_part(tensor_parallel_rank));
}

std::optional<int64_t> step_of_folder_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size() || name.size() > kPrefix.size() + 18) {
    return std::nullopt;
  }
  int64_t step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string checkpoint_manifest_text(const json& manifest) {
  TS_CHECK(manifest.is_object() && !manifest.contains(kChecksumField),
           "a checkpoint manifest is written from an object without '{}'", kChecksumField);
  const std::string body = canonical_text(manifest);
  json with_sum = manifest;
  with_sum[kChecksumField] = hex64(XXH3_64bits(body.data(), body.size()));
  return with_sum.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& source,
                                             std::optional<int64_t> folder_step) {
  json root;
  try {
    root = parse_json_bounded(text, fmt::format("checkpoint manifest '{}'", source));
  } catch (const json::exception& e) {
    TS_FAIL("checkpoint manifest '{}' is not valid JSON ({}); {}", source, e.what(), kFix);
  }
  TS_CHECK(root.is_object(), "checkpoint manifest '{}' is a JSON {}, expected an object; {}", source, root.type_name(),
           kFix);
  const Fields f(source);
  TS_CHECK(root.contains("format") && root.at("format") == "tessera-checkpoint",
           "'{}' is not a tessera checkpoint manifest (its \"format\" is not \"tessera-checkpoint\")", source);

  CheckpointManifest m;
  const json& version = f.get(root, "", "version");
  TS_CHECK(version.is_number_integer() && version.get<int64_t>() >= kOldestCheckpointFormatVersion &&
               version.get<int64_t>() <= kCheckpointFormatVersion,
           "checkpoint manifest '{}' has format version {}, this tessera reads versions {} to {}{}", source,
           shown(version), kOldestCheckpointFormatVersion, kCheckpointFormatVersion,
           version.is_number_integer() && version.get<int64_t>() > kCheckpointFormatVersion
               ? ": it was saved by a newer tessera; load it with that one"
               : "");
  m.version = version.get<int>();

  // The self-checksum first: an edited manifest is named as such, whatever else it got wrong.
  if (m.version >= 2) {
    const std::string claimed = f.string(root, "", kChecksumField);
    json body = root;
    body.erase(kChecksumField);
    const std::string text_sum = canonical_text(body);
    const std::string actual = hex64(XXH3_64bits(text_sum.data(), text_sum.size()));
    TS_CHECK(claimed == actual,
             "checkpoint manifest '{}' was modified after it was saved: its contents hash to {}, but its {} says {}. "
             "A manifest is not meant to be edited by hand; restore it, or resume from another checkpoint",
             source, actual, kChecksumField, shown(root.at(kChecksumField)));
  }

  CheckpointState& s = m.state;
  s.step = f.integer(root, "", "step", 0, std::numeric_limits<int64_t>::max(), "a non-negative integer");
  if (folder_step.has_value() && *folder_step != s.step) {
    f.fail("step", fmt::format("says {} but the checkpoint's folder is named for step {}", s.step, *folder_step));
  }
  s.seed = f.unsigned_integer(root, "", "seed");

  const json& position = f.get(root, "", "data_position");
  data::LoaderState loader;
  try {
    loader = data::loader_state_from_json(position);
  } catch (const Error& e) {
    f.fail("data_position", fmt::format("is not a loader position ({})", e.what()));
  }
  // Each step consumes one global batch of the stream the run's seed keys.
  if (loader.steps != static_cast<uint64_t>(s.step)) {
    f.fail("data_position.steps", fmt::format("is {} but the checkpoint is at step {}", loader.steps, s.step));
  }
  if (loader.seed != s.seed) {
    f.fail("data_position.seed", fmt::format("is {} but the run's seed is {}", loader.seed, s.seed));
  }
  if (loader.sequences < loader.steps) {
    f.fail("data_position.sequences",
           fmt::format("is {}, fewer than one sequence per step over {} steps", loader.sequences, loader.steps));
  }
  s.data_position = position;

  if (root.contains("val_history")) {
    const json& history = root.at("val_history");
    if (!history.is_array()) f.fail("val_history", fmt::format("must be an array of numbers, got {}", shown(history)));
    for (const json& v : history) {
      // A non-finite loss is written as null by the JSON writer: it reads back as NaN.
      if (v.is_null()) {
        s.val_history.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      if (!v.is_number()) f.fail("val_history", fmt::format("must hold numbers only, got {}", shown(v)));
      s.val_history.push_back(v.get<double>());
    }
  }
  if (m.version >= 2) {
    const json& elapsed = f.get(root, "", "elapsed_seconds");
    if (!elapsed.is_number() || !std::isfinite(elapsed.get<double>()) || elapsed.get<double>() < 0) {
      f.fail("elapsed_seconds", fmt::format("must be a non-negative number of seconds, got {}", shown(elapsed)));
    }
    s.elapsed_seconds = elapsed.get<double>();
  }

  if (root.contains("loss_scale")) {
    const json& scaling = f.object(root, "", "loss_scale");
    memory::LossScaler::State ls;
    const json& scale = f.get(scaling, "loss_scale", "scale");
    if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() < 1.0) {
      f.fail("loss_scale.scale", fmt::format("must be a number of at least 1, got {}", shown(scale)));
    }
    ls.scale = scale.get<double>();
    ls.finite_steps = f.integer(scaling, "loss_scale", "finite_steps", 0, std::numeric_limits<int64_t>::max(),
                                "a non-negative integer");
    ls.skipped_steps = f.integer(scaling, "loss_scale", "skipped_steps", 0, s.step, "at most the checkpoint's step");
    s.loss_scale = ls;
  }

  if (root.contains("lr_restart")) {
    const json& restart = f.object(root, "", "lr_restart");
    CheckpointState::LrRestart r;
    r.step = f.integer(restart, "lr_restart", "step", 0, s.step, "a step no later than the checkpoint's");
    const json& rate = f.get(restart, "lr_restart", "rate");
    if (!rate.is_number() || !std::isfinite(rate.get<double>()) || rate.get<double>() < 0) {
      f.fail("lr_restart.rate", fmt::format("must be a non-negative learning rate, got {}", shown(rate)));
    }
    r.rate = rate.get<double>();
    s.lr_restart = r;
  }

  m.model = f.object(root, "", "model");
  check_model(f, m.model);
  m.parameter_count = f.integer(root, "", "parameter_count", 1, std::numeric_limits<int64_t>::max(),
                                "a positive integer");

  const json& optimizer = f.object(root, "", "optimizer");
  m.optimizer_name = f.string(optimizer, "optimizer", "name");
  m.optimizer_steps = f.integer(optimizer, "optimizer", "steps_taken", 0, std::numeric_limits<int64_t>::max(),
                                "a non-negative integer");
  if (m.optimizer_steps > s.step) {
    f.fail("optimizer.steps_taken", fmt::format("is {}, more than the checkpoint's step {}", m.optimizer_steps, s.step));
  }

  const json& parallel = f.object(root, "", "parallel");
  m.dp = static_cast<int>(f.integer(parallel, "parallel", "dp", 1, 1 << 20, "an integer of at least 1"));
  m.zero_stage = static_cast<int>(f.integer(parallel, "parallel", "zero_stage", 0, 3, "0, 1, 2 or 3"));
  m.ranks = static_cast<int>(f.integer(parallel, "parallel", "ranks", 1, 1 << 20, "an integer of at least 1"));
  if (parallel.contains("pp")) {
    m.pp = static_cast<int>(f.integer(parallel, "parallel", "pp", 1, 1 << 10, "an integer of at least 1"));
  }
  if (parallel.contains("tp")) {
    m.tp = static_cast<int>(f.integer(parallel, "parallel", "tp", 1, 1 << 10, "an integer of at least 1"));
  }
  if (parallel.contains("ep")) {
    m.ep = static_cast<int>(f.integer(parallel, "parallel", "ep", 1, 1 << 10, "an integer of at least 1"));
  }

  m.config_toml = f.string(root, "", "config");
  if (m.config_toml.empty()) f.fail("config", "is empty (it holds the run's resolved config)");

  const json& files = f.object(root, "", "files");
  if (files.empty()) f.fail("files", "is empty: a checkpoint lists every file it holds with its checksum");
  for (const auto& [name, info] : files.items()) {
    const std::string field = "files." + name;
    // Names are files inside the checkpoint folder: anything else would checksum a file elsewhere.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos || name == kCheckpointManifestFile) {
      f.fail(field, "is not the name of a file inside the checkpoint folder");
    }
    if (!info.is_object()) f.fail(field, fmt::format("must be an object with bytes and xxh3, got {}", shown(info)));
    CheckpointFileEntry entry;
    entry.bytes = f.unsigned_integer(info, field, "bytes");
    entry.xxh3 = f.string(info, field, "xxh3");
    if (!is_hex16(entry.xxh3)) f.fail(field + ".xxh3", fmt::format("must be 16 hex digits, got \"{}\"", shown(entry.xxh3)));
    m.files.emplace(name, std::move(entry));
  }
  if (!m.files.contains(kCheckpointModelFile)) {
    f.fail("files", fmt::format("does not list {}: every checkpoint holds the parameters", kCheckpointModelFile));
  }
  if (m.version >= 3) {
    for (int r = 0; r < m.ranks; ++r) {
      if (!m.files.contains(optimizer_shard_file_name(r))) {
        f.fail("files", fmt::format("does not list {}: a checkpoint of {} ranks holds the optimizer state of each",
                                    optimizer_shard_file_name(r), m.ranks));
      }
    }
  } else if ((m.pp > 1 || m.tp > 1) && m.zero_stage == 0) {
    for (int r = 0; r < m.pp; ++r) {
      for (int t = 0; t < m.tp; ++t) {
        const std::string name = optimizer_file_name(m.pp > 1 ? r : -1, m.tp > 1 ? t : -1);
        if (!m.files.contains(name)) {
          f.fail("files", fmt::format("does not list {}: a checkpoint of {} pipeline and {} tensor-parallel ranks "
                                      "holds the optimizer state of each", name, m.pp, m.tp));
        }
      }
    }
  } else if (m.zero_stage == 0) {
    if (!m.files.contains(kCheckpointOptimizerFile)) {
      f.fail("files", fmt::format("does not list {}, which a checkpoint saved without ZeRO holds",
                                  kCheckpointOptimizerFile));
    }
  } else {
    for (int r = 0; r < m.ranks; ++r) {
      if (!m.files.contains(zero_shard_file_name(r))) {
        f.fail("files", fmt::format("does not list {}: a ZeRO checkpoint of {} ranks holds one shard per rank (of "
                                    "its pipeline stage's parameters under pipelining)",
                                    zero_shard_file_name(r), m.ranks));
      }
    }
  }
  return m;
}

}  // namespace tessera::train
