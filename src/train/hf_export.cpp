#include "train/hf_export.h"

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"
#include "train/hf_layout.h"

namespace fs = std::filesystem;

namespace tessera::train {

std::vector<std::pair<std::string, std::string>> export_formats() {
  return {{"hf", "Hugging Face transformers: model.safetensors, config.json and the tokenizer (GPT-2, Llama, and Llama "
           "with experts as Mixtral)"}};
}

namespace {

using Json = nlohmann::ordered_json;

// The HF tensors of the model's parameters (train/hf_layout.h). Tensors made here (transposes,
// zero biases) come from `memory`; the writer keeps every tensor alive until it writes.
io::SafeTensorsWriter hf_weights(nn::GPT& model, MemoryAccountant& memory) {
  nn::ParameterStore& store = model.parameters();
  io::SafeTensorsWriter writer;
  for (const HfTensor& t : hf_tensors(model.config())) {
    Tensor value;
    switch (t.mapping) {
      case HfMapping::Same: value = store.value(store.get(t.param)); break;
      case HfMapping::Transposed:
        value = store.value(store.get(t.param)).transpose(0, 1).contiguous(memory, MemoryTag::Workspace);
        break;
      case HfMapping::Rows: value = store.value(store.get(t.param)).slice(0, t.row_begin, t.row_end); break;
      case HfMapping::Expert:  // one [F, C] or [C, F] block of the stack, contiguous as it is
        value = store.value(store.get(t.param)).slice(0, t.expert, t.expert + 1).reshape(t.shape);
        break;
      case HfMapping::Zeros: value = Tensor::zeros(t.shape, DType::F32, MemoryTag::Workspace, memory); break;
    }
    TS_CHECK(value.shape() == t.shape, "export: '{}' from '{}' has shape {}, the layout says {}", t.name, t.param,
             value.shape_string(), shape_to_string(t.shape));
    writer.add(t.name, value);
  }
  writer.set_metadata("format", "pt");  // transformers refuses safetensors files without it
  return writer;
}

Json tokenizer_config(const RunConfig& run, const data::Tokenizer& tokenizer) {
  auto piece = [&](int32_t id) { return id >= 0 ? Json(tokenizer.piece(id)) : Json(nullptr); };
  Json j;
  j["tokenizer_class"] = "LlamaTokenizer";
  j["model_max_length"] = run.model.seq_len;
  j["bos_token"] = piece(tokenizer.bos_id());
  j["eos_token"] = piece(tokenizer.eos_id());
  j["unk_token"] = piece(tokenizer.unk_id());
  // tessera's data has no BOS and ends documents with EOS; encoding adds neither.
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["legacy"] = false;
  return j;
}

void check_output_folder(const fs::path& out, bool force) {
  TS_CHECK(!out.empty(), "export needs an output folder");
  if (!fs::exists(out)) return;
  TS_CHECK(fs::is_directory(out), "the output '{}' is a file, not a folder: choose a folder to export into",
           out.string());
  TS_CHECK(force || fs::is_empty(out),
           "the output folder '{}' exists and is not empty: choose a new folder, or pass --force to write the "
           "export's files into it (replacing files of the same names)",
           out.string());
}

}  // namespace

ExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, bool force) {
  const fs::path out(out_dir);
  check_output_folder(out, force);
  ExportResult result;
  result.checkpoint = resolve_checkpoint(checkpoint, "", &result.note);
  const RunConfig run = checkpoint_run_config(read_checkpoint_manifest(result.checkpoint), result.checkpoint);
  const config::ModelConfig& c = run.model;
  if (const auto refusal = hf_refusal(c)) TS_FAIL("export: {}", *refusal);
  MemoryAccountant memory;
  nn::GPT model(c, memory, 0);
  const LoadedWeights loaded = load_weights(result.checkpoint, c, {model.parameters(), model.parameters(), nullptr, {}});
  std::optional<data::Tokenizer> tokenizer;
  if (!loaded.tokenizer_path.empty()) tokenizer.emplace(data::Tokenizer::load(loaded.tokenizer_path));

  const io::SafeTensorsWriter weights = hf_weights(model, memory);
  result.model_type = hf_model_type(hf_model_of(c));
  result.forward_differences = mixtral_forward_differences(c);
  fs::create_directories(out);
  weights.write((out / "model.safetensors").string());
  const int32_t bos = tokenizer ? tokenizer->bos_id() : -1, eos = tokenizer ? tokenizer->eos_id() : -1;
  write_file_atomically((out / "config.json").string(), hf_config_json(c, bos, eos).dump(2) + "\n");
  result.files = {"model.safetensors", "config.json"};
  if (tokenizer) {
    tokenizer->save(out / "tokenizer.model");
    write_file_atomically((out / "tokenizer_config.json").string(), tokenizer_config(run, *tokenizer).dump(2) + "\n");
    result.files.push_back("tokenizer.model");
    result.files.push_back("tokenizer_config.json");
  }
  return result;
}

}  // namespace tessera::train
