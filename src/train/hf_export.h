#pragma once
// Export of a checkpoint in the layout of Hugging Face transformers, so the model loads with
// `AutoModelForCausalLM.from_pretrained(dir)` and the tools built on it:
//   model.safetensors      the weights (f32), by the names of GPT2LMHeadModel, LlamaForCausalLM or,
//                          for a Llama with experts, MixtralForCausalLM
//   config.json            the architecture, sizes, context length, norm epsilon, rotary base,
//                          tied or untied head, vocabulary size, BOS/EOS ids (from the tokenizer)
//   tokenizer.model        the SentencePiece model the data was tokenized with, as it is
//   tokenizer_config.json  special tokens and LlamaTokenizer, transformers' reader of SentencePiece
//                          models (GPT-2's own tokenizer is byte-level BPE and cannot read one)
//
// The names, layouts and config.json keys are train/hf_layout.h's, which the import
// (train/hf_import.h: train.init_from and `tessera sample` read such a folder) shares.
#include <string>
#include <vector>

namespace tessera::train {

// The formats `tessera export --format` knows, and what each writes.
std::vector<std::pair<std::string, std::string>> export_formats();

struct ExportResult {
  std::string checkpoint;          // the resolved step folder
  std::string note;                // how it was resolved, when not as named (resolve_checkpoint)
  std::string model_type;          // "gpt2", "llama" or "mixtral"
  // How the Hugging Face class's forward differs from tessera's on these weights (Mixtral's
  // router: mixtral_forward_differences in train/hf_layout.h), or "" where it is the same.
  std::string forward_differences;
  std::vector<std::string> files;  // written into the output folder
};

// Writes `checkpoint` (a run folder, its checkpoints/ folder or a step folder) into `out_dir` in
// the Hugging Face layout. An existing output folder that is not empty is refused unless `force`
// (then the export's files replace their namesakes; other files stay).
ExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, bool force);

}  // namespace tessera::train
