// tessera train --config FILE [--section.key value ...]
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/errors.h"
#include "config/model_config.h"
#include "dist/mpi_runtime.h"
#include "train/trainer.h"

namespace tessera::cli {

namespace {

// "--train.steps 100" and "--train.steps=100" pairs from the arguments CLI11 left over.
std::vector<std::pair<std::string, std::string>> parse_overrides(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    TS_CHECK(a.starts_with("--") && a.size() > 2,
             "unexpected argument '{}': overrides look like --section.key value (e.g. --train.steps 100)", a);
    std::string key = a.substr(2);
    const size_t eq = key.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(key.substr(0, eq), key.substr(eq + 1));
      continue;
    }
    TS_CHECK(key.find('.') != std::string::npos,
             "unknown option '{}': config overrides name a section and a key, like --train.steps 100", a);
    TS_CHECK(i + 1 < args.size(), "override '{}' has no value", a);
    out.emplace_back(key, args[++i]);
  }
  return out;
}

// Whether an MPI launcher (mpirun, srun) started this process. A plain `tessera train` with
// parallel.dp = 1 then never touches MPI, so it starts fast and needs no MPI runtime at all.
bool started_by_mpi_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

void print_result(const train::TrainResult& r) {
  if (!r.sample_text.empty()) fmt::print("\nsample:\n{}\n\n", r.sample_text);
  fmt::print("chart:      {}\nmetrics:    {}\ncheckpoint: {}\n", r.chart_path, r.metrics_path, r.checkpoint_path);
  fmt::print("RESULT val_loss={:.4f} baseline={:.4f}\n", r.val_loss, r.unigram_entropy);
}

// One process per data-parallel rank. MPI lives exactly as long as this function (so `tessera
// launch`, which only builds an mpirun command, never starts it); communicators go before it.
void train_under_mpi(const train::RunConfig& config, const Globals& globals) {
  dist::MpiRuntime mpi;
  try {
    dist::CommOptions options;
    options.timeout_seconds = config.parallel.timeout_seconds;
    auto world = mpi.world(options);
    train::TrainResult r = train::Trainer(config, world.get()).run();
    world.reset();
    if (mpi.world_rank() == 0) print_result(r);
  } catch (const std::exception& e) {
    if (mpi.world_size() == 1) throw;  // reported by main, like any single-process error
    // Every rank that fails says so; the first to get here ends the job, so no peer waits for it.
    fmt::print(stderr, "rank {}: {}\n", mpi.world_rank(), describe_error(e, globals.debug));
    std::fflush(stderr);
    mpi.abort_job(1);
  }
}

}  // namespace

void add_train_command(CLI::App& app, const Globals& globals) {
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML config (with --section.key value overrides)");
  auto config_path = std::make_shared<std::string>();
  cmd->add_option("-c,--config", *config_path, "TOML config file (configs/default.toml is the documented default)");
  cmd->allow_extras();
  cmd->footer(
      "Overrides: any config key as --section.key value, e.g.\n"
      "  tessera train --config configs/default.toml --train.steps 200 --model.n_layer 2\n"
      "Resume: --checkpoint.resume latest (or a checkpoint folder).\n"
      "Data parallel + ZeRO: tessera launch -n 4 -- train --config FILE --parallel.dp 4 --parallel.zero_stage 2");
  cmd->callback([cmd, config_path, &globals]() {
    std::error_code ec;
    TS_CHECK(!std::filesystem::is_directory(*config_path, ec), "{}",
             config::describe_folder_given_as_toml(*config_path, "--config"));
    train::RunConfig config = train::load_run_config(*config_path, parse_overrides(cmd->remaining()));
    if (started_by_mpi_launcher()) {
      train_under_mpi(config, globals);
    } else {
      // One process; a config asking for dp > 1 is refused by the trainer, naming the launcher.
      print_result(train::Trainer(config).run());
    }
  });
}

}  // namespace tessera::cli
