#pragma once
// Each `tessera <command>` lives in its own file and registers itself on the top-level app.
// A command's callback returns normally on success and throws tessera::Error on failure;
// main() turns that into a message and a non-zero exit code.
#include <CLI/CLI.hpp>

namespace tessera::cli {

void add_train_command(CLI::App& app);     // train_command.cpp: the training program
void add_sample_command(CLI::App& app);    // sample_command.cpp: text from a checkpoint
void add_export_command(CLI::App& app);    // export_command.cpp: a checkpoint in another framework's layout
void add_simulate_command(CLI::App& app);  // simulate_command.cpp: pipeline schedules
void add_plan_command(CLI::App& app);      // plan_command.cpp: cost model and planner
void add_data_command(CLI::App& app);      // data_command.cpp: corpus, tokenizer, token files
void add_launch_command(CLI::App& app);

}  // namespace tessera::cli
