// tessera sample --checkpoint DIR [--prompt TEXT] [--tokens N] ...
#include <fmt/format.h>

#include <cmath>
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
    int64_t seed = 0;  // signed, so that -1 is refused rather than read as 2^64 - 1
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint folder (or a run's checkpoints/ folder: its latest)")
      ->required();
  cmd->add_option("--prompt", o->prompt, "text to continue (default: a newline)");
  cmd->add_option("--tokens", o->sampling.max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed, 0 or more")->capture_default_str();
  cmd->callback([o]() {
    const train::SamplingOptions& s = o->sampling;
    TS_CHECK(s.max_new_tokens >= 1, "--tokens must be at least 1 (tokens to generate), got {}", s.max_new_tokens);
    TS_CHECK(std::isfinite(s.temperature) && s.temperature > 0.0f,
             "--temperature must be a finite number above 0 (lower is more predictable), got {}", s.temperature);
    TS_CHECK(s.top_k >= 0, "--top-k must be 0 (the whole vocabulary) or more, got {}", s.top_k);
    TS_CHECK(o->seed >= 0, "--seed must be 0 or more, got {}", o->seed);
    o->sampling.seed = static_cast<uint64_t>(o->seed);
    std::string path = o->checkpoint;
    if (std::filesystem::exists(std::filesystem::path(path) / "latest")) {
      path = *train::CheckpointStore(path, 1).latest();
    }
    nlohmann::json manifest = train::read_checkpoint_manifest(path);
    train::RunConfig config = train::read_run_config(toml::parse(manifest.at("config").get<std::string>()));
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
