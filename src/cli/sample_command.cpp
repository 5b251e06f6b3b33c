// tessera sample --checkpoint DIR [--prompt TEXT] [--tokens N] ...
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"
#include "train/sampler.h"

namespace tessera::cli {

void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  struct Options {
    std::string checkpoint, prompt;
    train::SamplingOptions sampling;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--checkpoint", o->checkpoint, "a checkpoint folder, a run folder or its checkpoints/ folder (then its latest checkpoint)")
      ->required();
  cmd->add_option("--prompt", o->prompt, "text to continue (default: a newline)");
  cmd->add_option("--tokens", o->sampling.max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "random seed")->capture_default_str();
  cmd->callback([o]() {
    std::string note;
    const std::string path = train::resolve_checkpoint(o->checkpoint, "", &note);
    // On stderr: stdout carries only the generated text.
    if (!note.empty()) fmt::print(stderr, "{}\n", note);
    const train::CheckpointManifest manifest = train::read_checkpoint_manifest(path);
    const train::RunConfig config = train::checkpoint_run_config(manifest, path);
    MemoryAccountant memory;
    nn::GPT model(config.model, memory, 0);
    train::load_checkpoint(path, config, {model.parameters(), model.parameters(), nullptr, {}});
    data::Tokenizer tokenizer = data::Tokenizer::load(std::filesystem::path(path) / "tokenizer.model");
    std::vector<int32_t> prompt = tokenizer.encode(o->prompt.empty() ? std::string("\n") : o->prompt);
    TS_CHECK(!prompt.empty(), "the prompt encodes to no tokens; give a longer --prompt");
    std::vector<int32_t> out = train::generate(model, memory, model.parameters(), prompt, o->sampling);
    fmt::print("{}\n", tokenizer.decode(out));
  });
}

}  // namespace tessera::cli
