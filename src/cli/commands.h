#pragma once
// Each `tessera <command>` lives in its own file and registers itself on the top-level app.
// A command's callback returns normally on success and throws on failure (tessera::Error, or
// anything else); main() turns that into one line and a non-zero exit code (cli/errors.h).
#include <CLI/CLI.hpp>

namespace tessera::cli {

// Settings of the whole program, owned by main() and read by the commands that need them.
struct Globals {
  bool debug = false;  // --debug: errors also say where in the source they were raised
};

// Every rank of a multi-process run reports its own error before ending the job, so `train`
// needs to know how much to say.
void add_train_command(CLI::App& app, const Globals& globals);  // train_command.cpp: the training program
void add_sample_command(CLI::App& app);    // sample_command.cpp: text from a checkpoint
void add_export_command(CLI::App& app);    // export_command.cpp: a checkpoint in another framework's layout
void add_simulate_command(CLI::App& app);  // simulate_command.cpp: pipeline schedules
void add_plan_command(CLI::App& app);      // plan_command.cpp: cost model and planner
void add_data_command(CLI::App& app);      // data_command.cpp: corpus, tokenizer, token files
void add_launch_command(CLI::App& app);
void add_compatibility_command(CLI::App& app);  // compatibility_command.cpp: which settings run together
void add_config_keys_command(CLI::App& app);    // config_keys_command.cpp: the run config's keys

}  // namespace tessera::cli
