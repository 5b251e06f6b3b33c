// tessera export --format hf CHECKPOINT DIR
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "core/check.h"
#include "train/hf_export.h"

namespace tessera::cli {

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint in another framework's layout");
  struct Options {
    std::string format = "hf", checkpoint, out;
    bool force = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--format", o->format, "hf: Hugging Face transformers (model.safetensors, config.json, tokenizer)")
      ->capture_default_str();
  cmd->add_flag("--force", o->force, "write into an output folder that is not empty (replacing files of the same names)");
  cmd->add_option("checkpoint", o->checkpoint, "a run folder, its checkpoints/ folder (their latest) or a step folder")
      ->required();
  cmd->add_option("dir", o->out, "the output folder")->required();
  cmd->callback([o]() {
    std::string known;
    bool found = false;
    for (const auto& [name, what] : train::export_formats()) {
      known += fmt::format("\n  {}: {}", name, what);
      found = found || name == o->format;
    }
    TS_CHECK(found, "export: unknown --format '{}'; the formats are:{}", o->format, known);
    const train::ExportResult r = train::export_hf(o->checkpoint, o->out, o->force);
    if (!r.note.empty()) fmt::print("{}\n", r.note);
    fmt::print("exported {} ({}) to {}: {}\n", r.checkpoint, r.model_type, o->out, fmt::join(r.files, ", "));
    if (!r.forward_differences.empty()) fmt::print("note: {}.\n", r.forward_differences);
  });
}

}  // namespace tessera::cli
