#include "train/hf_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/dtype.h"
#include "core/json_input.h"
#include "io/safetensors.h"
#include "train/hf_layout.h"

namespace fs = std::filesystem;

namespace tessera::train {

using config::Architecture;
using config::ModelConfig;

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kTokenizerFile = "tokenizer.model";
// Far above any config.json or shard index (a line per tensor), small enough that a foreign file
// cannot make the reader swallow gigabytes.
constexpr uintmax_t kMaxJsonBytes = 64u << 20;

nlohmann::json read_json_file(const fs::path& path) {
  std::error_code ec;
  TS_CHECK(fs::is_regular_file(path, ec), "'{}' is missing or not a file", path.string());
  const uintmax_t size = fs::file_size(path, ec);
  TS_CHECK(!ec && size <= kMaxJsonBytes, "'{}' is {} bytes, more than such a file ever is ({} at most); it is "
           "damaged or not what its name says", path.string(), size, kMaxJsonBytes);
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot read '{}'", path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_json_bounded(text.str(), path.string());
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("'{}' is not valid JSON ({}); the file is damaged: download or write it again", path.string(), e.what());
  }
}

std::string no_weights_message(const fs::path& folder) {
  std::error_code ec;
  std::string hint;
  if (fs::exists(folder / "pytorch_model.bin", ec) || fs::exists(folder / "pytorch_model.bin.index.json", ec)) {
    hint = " It holds pytorch_model.bin, which tessera does not read: save the model as safetensors (transformers' "
           "save_pretrained(folder, safe_serialization=True)).";
  } else {
    for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("model-") && name.ends_with(".safetensors")) {
        hint = fmt::format(" It holds shards such as {} but no index naming their tensors: add {}.", name, kIndexFile);
        break;
      }
    }
  }
  return fmt::format("'{}' has {} but no weights: neither {} nor {} with the shards it names "
                     "(model-0000N-of-0000M.safetensors).{}",
                     folder.string(), kConfigFile, kWeightsFile, kIndexFile, hint);
}

// Whole values of a stored tensor, in f32 (exact from bf16 and f16). The data may sit unaligned in
// the file, so it is copied before it is converted.
std::vector<float> to_f32(const io::SafeTensorEntry& e, const std::string& file) {
  const size_t n = static_cast<size_t>(shape_numel(e.shape));
  std::vector<float> out(n);
  switch (e.dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out.data(), e.data, n * sizeof(float));
      break;
    case DType::BF16: {
      std::vector<bf16> half(n);
      if (n > 0) std::memcpy(half.data(), e.data, n * sizeof(bf16));
      convert_bf16_to_f32(out.data(), half.data(), n);
      break;
    }
    case DType::F16: {
      std::vector<f16> half(n);
      if (n > 0) std::memcpy(half.data(), e.data, n * sizeof(f16));
      convert_f16_to_f32(out.data(), half.data(), n);
      break;
    }
    default:
      TS_FAIL("tensor '{}' in '{}' is {}; weights are read from F32, BF16 or F16 tensors", e.name, file,
              io::safetensors_dtype_name(e.dtype));
  }
  return out;
}

// The folder's weights: model.safetensors, or the shards that model.safetensors.index.json names.
class HfWeightFiles {
 public:
  HfWeightFiles(const fs::path& folder, std::string_view model_class) : model_class_(model_class) {
    std::error_code ec;
    if (fs::is_regular_file(folder / kWeightsFile, ec)) {
      io::SafeTensorsFile file = io::SafeTensorsFile::open((folder / kWeightsFile).string());
      for (const std::string& name : file.names()) file_of_[name] = kWeightsFile;
      files_.emplace(kWeightsFile, std::move(file));
      return;
    }
    TS_CHECK(fs::is_regular_file(folder / kIndexFile, ec), "{}", no_weights_message(folder));
    index_ = (folder / kIndexFile).string();
    const nlohmann::json index = read_json_file(index_);
    TS_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "'{}' has no \"weight_map\" object (each tensor's name and the shard that holds it); the index is "
             "damaged: download or write it again", index_);
    std::map<std::string, int> tensors_in;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      TS_CHECK(shard.is_string(), "'{}': weight_map[\"{}\"] = {} is not a file name", index_, tensor, shard.dump());
      const std::string file = shard.get<std::string>();
      TS_CHECK(!file.empty() && file != "." && file != ".." && fs::path(file).filename() == fs::path(file),
               "'{}': weight_map[\"{}\"] = \"{}\" is not the name of a file beside the index", index_, tensor, file);
      file_of_[tensor] = file;
      ++tensors_in[file];
    }
    for (const auto& [tensor, file] : file_of_) {
      if (files_.contains(file)) continue;
      TS_CHECK(fs::is_regular_file(folder / file, ec),
               "'{}' names the shard '{}' (holding '{}' and {} more tensors), which '{}' does not have: copy every "
               "shard the index names into the folder",
               index_, file, tensor, tensors_in[file] - 1, folder.string());
      files_.emplace(file, io::SafeTensorsFile::open((folder / file).string()));
    }
  }

  // Tensor `name` as f32 values [shape], from its file or shard. A name the files lack is also
  // looked for without its "transformer." or "model." prefix.
  std::vector<float> read(const std::string& name, const Shape& shape) {
    const std::optional<std::string> stored = stored_name(name);
    if (!stored) {
      TS_CHECK(!index_.empty(), "'{}' has no tensor '{}', which a {} of the folder's config.json needs ({} tensors "
               "in the file): the weights and config.json do not belong together",
               files_.begin()->second.path(), name, model_class_, file_of_.size());
      TS_FAIL("tensor '{}', which a {} of the folder's config.json needs, is not in the weight_map of '{}': the "
              "weights and config.json do not belong together", name, model_class_, index_);
    }
    const io::SafeTensorsFile& file = files_.at(file_of_.at(*stored));
    TS_CHECK(file.has(*stored), "'{}' puts tensor '{}' in '{}', which has no such tensor: the shard does not belong "
             "to this index", index_, *stored, file.path());
    const io::SafeTensorEntry& entry = file.entry(*stored);
    TS_CHECK(entry.shape == shape, "tensor '{}' in '{}' has shape {}, but a {} of the folder's config.json needs {}: "
             "the weights and config.json do not belong together",
             *stored, file.path(), shape_to_string(entry.shape), model_class_, shape_to_string(shape));
    read_.insert(*stored);
    return to_f32(entry, file.path());
  }

  // The tensors of the files that read() did not take, by name.
  std::vector<std::string> unread() const {
    std::vector<std::string> names;
    for (const auto& [name, file] : file_of_) {
      if (!read_.contains(name)) names.push_back(name);
    }
    return names;
  }

 private:
  std::optional<std::string> stored_name(const std::string& name) const {
    if (file_of_.contains(name)) return name;
    for (std::string_view prefix : {"transformer.", "model."}) {
      if (name.starts_with(prefix) && file_of_.contains(name.substr(prefix.size()))) return name.substr(prefix.size());
    }
    return std::nullopt;
  }

  std::string model_class_;
  std::string index_;                                 // the shard index, or "" for one model.safetensors
  std::map<std::string, io::SafeTensorsFile> files_;  // by file name
  std::map<std::string, std::string> file_of_;        // tensor name -> file name
  std::set<std::string> read_;
};

// Puts a tensor of the file into `whole`, the values [param_shape] of the parameter it belongs to.
void place(const std::vector<float>& values, const HfTensor& t, const Shape& param_shape, std::vector<float>& whole) {
  const int64_t row = param_shape.empty() ? 1 : shape_numel(param_shape) / param_shape[0];
  switch (t.mapping) {
    case HfMapping::Same:
      TS_CHECK(values.size() == whole.size(), "'{}' does not fill '{}'", t.name, t.param);
      whole = values;
      break;
    case HfMapping::Transposed: {
      const int64_t in = t.shape.at(0), out = t.shape.at(1);
      TS_CHECK(param_shape == Shape({out, in}), "'{}' [in, out] is not the transpose of '{}'", t.name, t.param);
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t o = 0; o < out; ++o) whole[static_cast<size_t>(o * in + i)] = values[static_cast<size_t>(i * out + o)];
      }
      break;
    }
    case HfMapping::Rows:
      TS_CHECK(t.row_end <= param_shape.at(0) && static_cast<int64_t>(values.size()) == (t.row_end - t.row_begin) * row,
               "'{}' is not rows {}..{} of '{}'", t.name, t.row_begin, t.row_end, t.param);
      std::copy(values.begin(), values.end(), whole.begin() + t.row_begin * row);
      break;
    case HfMapping::Expert:
      TS_CHECK(t.expert < param_shape.at(0) && static_cast<int64_t>(values.size()) == row,
               "'{}' is not expert {} of '{}'", t.name, t.expert, t.param);
      std::copy(values.begin(), values.end(), whole.begin() + t.expert * row);
      break;
    case HfMapping::Zeros:
      break;
  }
}

// tessera's model keys that decide the weights and the function of a model, with their values as
// text (a float's shortest text is equal exactly when the floats are).
std::vector<std::pair<std::string, std::string>> model_keys(const ModelConfig& m) {
  return {{"arch", config::architecture_name(m.arch)},
          {"n_layer", fmt::format("{}", m.n_layer)},
          {"n_head", fmt::format("{}", m.n_head)},
          {"n_kv_head", fmt::format("{}", m.kv_heads())},
          {"n_embd", fmt::format("{}", m.n_embd)},
          {"vocab_size", fmt::format("{}", m.vocab_size)},
          {"seq_len", fmt::format("{}", m.seq_len)},
          {"ffn_hidden", fmt::format("{}", m.ffn())},
          {"bias", fmt::format("{}", m.bias)},
          {"tied_embeddings", fmt::format("{}", m.tied_embeddings)},
          {"norm_eps", fmt::format("{}", m.norm_eps)},
          {"rope_theta", fmt::format("{}", m.rope_theta)},
          {"moe_experts", fmt::format("{}", m.moe_experts)},
          {"moe_top_k", fmt::format("{}", m.moe_top_k)},
          {"moe_every", fmt::format("{}", m.moe_every)},
          {"activation", config::activation_name(m.mlp_activation())}};
}

// "model.n_layer: config.json num_hidden_layers = 2 vs config 3; ..." for every key that differs.
std::string model_differences(const ModelConfig& folder, const ModelConfig& run) {
  const bool both_gpt2 = folder.arch == Architecture::Gpt2 && run.arch == Architecture::Gpt2;
  const bool both_llama = folder.arch == Architecture::Llama && run.arch == Architecture::Llama;
  const auto theirs = model_keys(folder), ours = model_keys(run);
  std::string differences;
  for (size_t i = 0; i < theirs.size(); ++i) {
    const std::string& key = theirs[i].first;
    // HF's GPT-2 always has biases; a model without them takes zero ones (checked as they are read).
    if (key == "bias" && both_gpt2) continue;
    if (key == "rope_theta" && !both_llama) continue;  // only Llama's positions rotate
    // Read by models with experts only.
    if ((key == "moe_top_k" || key == "moe_every") && folder.moe_experts == 0 && run.moe_experts == 0) continue;
    if (theirs[i].second == ours[i].second) continue;
    const std::string_view hf_key = hf_config_key(hf_model_of(folder), key);
    differences += fmt::format("{}model.{}: {} {}{} vs config {}", differences.empty() ? "" : "; ", key, kConfigFile,
                               hf_key.empty() ? "" : fmt::format("{} = ", hf_key), theirs[i].second, ours[i].second);
  }
  return differences;
}

void check_same_model(const fs::path& folder, const ModelConfig& saved, const ModelConfig& model) {
  const std::string differences = model_differences(saved, model);
  if (differences.empty()) return;
  std::string fix = "set those model keys to the folder's values";
  if (saved.vocab_size != model.vocab_size) {
    std::error_code ec;
    const std::string tokenize =
        fs::exists(folder / kTokenizerFile, ec)
            ? fmt::format("Prepare it with `tessera data prepare --tokenizer {} ...` (model.vocab_size then follows)",
                          (folder / kTokenizerFile).string())
            : fmt::format("The folder has no {} (tessera reads SentencePiece tokenizers): tokenize the data with one "
                          "of the model's vocabulary",
                          kTokenizerFile);
    fix = fmt::format("the vocabulary differs: the data must be tokenized with the model's tokenizer. {}, or set "
                      "model.vocab_size = {} if every id of your data is below it; then set any other key listed to "
                      "the folder's value",
                      tokenize, saved.vocab_size);
  }
  TS_FAIL("Hugging Face folder '{}' holds a model of another shape than this run's ({}); starting from its weights "
          "needs the same model: {}",
          folder.string(), differences, fix);
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  return fs::is_directory(p, ec) && fs::is_regular_file(p / kConfigFile, ec) &&
         !fs::exists(p / kCheckpointManifestFile, ec);
}

ModelConfig read_hf_model_config(const std::string& folder) {
  const fs::path file = fs::path(folder) / kConfigFile;
  return model_config_from_hf(read_json_file(file), file.string());
}

LoadedWeights load_hf_weights(const std::string& folder, const ModelConfig& model, const ModelState& state) {
  const fs::path dir(folder);
  check_same_model(dir, read_hf_model_config(folder), model);
  HfWeightFiles files(dir, hf_class_name(hf_model_of(model)));
  std::map<std::string, std::vector<const HfTensor*>> parts;  // by tessera parameter
  const std::vector<HfTensor> tensors = hf_tensors(model);
  for (const HfTensor& t : tensors) {
    if (t.mapping != HfMapping::Zeros) {
      parts[t.param].push_back(&t);
      continue;
    }
    const std::vector<float> values = files.read(t.name, t.shape);
    TS_CHECK(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }),
             "tensor '{}' of '{}' holds biases that are not zero, and this run's model has none (model.bias = false): "
             "set model.bias = true to start from these weights", t.name, folder);
  }
  size_t placed = 0;
  for (const nn::Parameter& p : state.params.all()) {
    const auto it = parts.find(p.name);
    TS_CHECK(it != parts.end(), "parameter '{}' has no tensor in the Hugging Face layout", p.name);
    const Shape shape = p.spec.unpadded_shape();
    std::vector<float> whole(static_cast<size_t>(shape_numel(shape)));
    for (const HfTensor* t : it->second) place(files.read(t->name, t->shape), *t, shape, whole);
    set_parameter_from_whole(state, p, Tensor::from_external(whole.data(), shape, DType::F32));
    ++placed;
  }
  TS_CHECK(placed == parts.size(), "the Hugging Face layout names parameters the model does not have");

  LoadedWeights loaded;
  loaded.path = folder;
  std::error_code ec;
  if (fs::exists(dir / kTokenizerFile, ec)) loaded.tokenizer_path = (dir / kTokenizerFile).string();
  const std::vector<std::string> unread = files.unread();
  if (!unread.empty()) {
    constexpr size_t kNamed = 5;
    const std::vector<std::string> named(unread.begin(), unread.begin() + std::min(unread.size(), kNamed));
    loaded.note = fmt::format("note: {} tensor{} of '{}' left out (the model has no place for {}): {}{}", unread.size(),
                              unread.size() == 1 ? "" : "s", folder, unread.size() == 1 ? "it" : "them",
                              fmt::join(named, ", "), unread.size() > kNamed ? ", ..." : "");
  }
  if (const std::string differences = mixtral_forward_differences(model); !differences.empty()) {
    loaded.note += fmt::format("{}note: '{}' holds a Mixtral model, and tessera's forward of it is not "
                               "MixtralForCausalLM's: {}.", loaded.note.empty() ? "" : "\n", folder, differences);
  }
  return loaded;
}

}  // namespace tessera::train
