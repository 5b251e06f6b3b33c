// tessera sample --checkpoint DIR [--prompt TEXT] [--tokens N] ...
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "cli/commands.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"
#include "train/hf_import.h"
#include "train/sampler.h"

namespace tessera::cli {

void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  struct Options {
    std::string checkpoint, prompt;
    train::SamplingOptions sampling;
    int64_t seed = 0;  // signed, so that -1 is refused rather than read as 2^64 - 1
    bool ignore_eos = false, no_cache = false;
    std::string window = "halve";
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "a run folder, its checkpoints/ folder (their latest checkpoint), a step folder, or a folder in "
                  "the Hugging Face layout (config.json, model.safetensors or its shards, tokenizer.model)")
      ->required();
  cmd->add_option("--prompt", o->prompt, "text to continue (default: a newline)");
  cmd->add_option("--tokens", o->sampling.max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "sampling temperature (0: the likeliest token every time)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed, 0 or more")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past the tokenizer's end-of-sequence token");
  cmd->add_option("--window", o->window,
                  "past the model's context: halve (restart from the last seq_len/2 tokens; fast) or slide (every "
                  "token sees the last seq_len tokens; each reruns the whole context)")
      ->capture_default_str();
  cmd->add_flag("--no-kv-cache", o->no_cache,
                "rerun the whole context for every token instead of decoding with a key/value cache (slow; for "
                "comparison)");
  cmd->callback([o]() {
    // Every input is checked before the checkpoint is read.
    train::validate_sampling_options(o->sampling, {"--tokens", "--temperature", "--top-k"});
    TS_CHECK(o->seed >= 0, "--seed must be 0 or more, got {}", o->seed);
    o->sampling.seed = static_cast<uint64_t>(o->seed);
    TS_CHECK(o->window == "halve" || o->window == "slide", "--window = '{}' is not known; use \"halve\" or \"slide\"",
             o->window);
    const size_t bad = data::first_invalid_utf8(o->prompt);
    TS_CHECK(bad == o->prompt.size(),
             "the --prompt text is not valid UTF-8: the byte 0x{:02X} at offset {} does not start a valid character; "
             "give the prompt in UTF-8 (check the terminal's or the file's encoding)",
             static_cast<unsigned>(static_cast<unsigned char>(o->prompt[bad])), bad);
    const bool hugging_face = train::is_hf_folder(o->checkpoint);
    std::string path = o->checkpoint;
    config::ModelConfig model_config;
    if (hugging_face) {
      model_config = train::read_hf_model_config(path);
    } else {
      std::string note;
      path = train::resolve_checkpoint(o->checkpoint, "", &note);
      // On stderr: stdout carries only the generated text.
      if (!note.empty()) fmt::print(stderr, "{}\n", note);
      model_config = train::checkpoint_run_config(train::read_checkpoint_manifest(path), path).model;
    }
    const std::filesystem::path tokenizer_path = std::filesystem::path(path) / "tokenizer.model";
    TS_CHECK(std::filesystem::exists(tokenizer_path),
             "{} '{}' has no tokenizer.model, so its text cannot be encoded or decoded; {}",
             hugging_face ? "Hugging Face folder" : "checkpoint", path,
             hugging_face ? fmt::format("tessera reads SentencePiece tokenizers only: put the model's SentencePiece "
                                        "model at {}", tokenizer_path.string())
                          : std::string("copy the dataset's tokenizer.model into it"));
    data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_path);
    MemoryAccountant memory;
    nn::GPT model(model_config, memory, 0);
    const train::LoadedWeights weights =
        train::load_weights(path, model_config, {model.parameters(), model.parameters(), nullptr, {}});
    if (hugging_face && !weights.note.empty()) fmt::print(stderr, "{}\n", weights.note);
    std::vector<int32_t> prompt = tokenizer.encode(o->prompt.empty() ? std::string("\n") : o->prompt);
    TS_CHECK(!prompt.empty(), "the prompt encodes to no tokens; give a longer --prompt");
    train::SamplingOptions sampling = o->sampling;
    sampling.eos_id = o->ignore_eos ? -1 : tokenizer.eos_id();
    sampling.kv_cache = !o->no_cache;
    sampling.window = o->window == "slide" ? train::ContextWindow::Slide : train::ContextWindow::Halve;
    std::vector<int32_t> out = train::generate(model, memory, model.parameters(), prompt, sampling);
    fmt::print("{}\n", tokenizer.decode(out));
  });
}

}  // namespace tessera::cli
