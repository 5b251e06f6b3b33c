#pragma once
// Runs the tessera program in a fresh process for tests: exit code and everything it printed.
#include <string>
#include <vector>
#include <sys/types.h>

#include <nlohmann/json.hpp>

namespace tessera::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `args` is appended to the tessera executable's path and run through the shell.
CliResult run_tessera(const std::string& args);
// Starts tessera in the background (output to `log_path`) in a process group of its own, whose id
// is its pid; returns the pid.
pid_t spawn_tessera(const std::string& args, const std::string& log_path);
std::string tessera_exe();
std::string read_file(const std::string& path);
// The loss of every "train" line of a run's metrics.jsonl, in order.
std::vector<double> train_losses_of(const std::string& metrics_path);
// The last "train" line of a run's metrics.jsonl (null when it has none).
nlohmann::json last_train_line(const std::string& metrics_path);
// The "predicted activation peak 0.3 MiB" of a run's start line, in MiB (-1 when it has none).
double predicted_activation_peak(const std::string& output);
// Deterministic English-like text (sentences over a small vocabulary) for a tokenizer and a tiny model.
std::string make_test_corpus(size_t bytes);
// Writes `corpus_bytes` of that text into `root` and prepares it as the dataset `root`/data with a
// vocabulary of `vocab_size` and a tenth held out; the result of `tessera data prepare`.
CliResult prepare_test_dataset(const std::string& root, size_t corpus_bytes, int vocab_size);

}  // namespace tessera::testing
