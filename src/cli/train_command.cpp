// tessera train --config FILE [--section.key value ...]
//
// Exit codes: 0 finished (or nothing to do: a finished run resumed), 1 error, 2 bad command line,
// 3 stopped early with a checkpoint (train.exit_after, train.max_minutes, SIGINT or SIGTERM):
// resume with --checkpoint.resume latest (or auto) to continue.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/errors.h"
#include "cli/run_overrides.h"
#include "config/model_config.h"
#include "core/stop_signals.h"
#include "dist/job_status.h"
#include "dist/mpi_runtime.h"
#include "dist/startup_guard.h"
#include "train/trainer.h"

namespace tessera::cli {

namespace {

constexpr int kStoppedEarly = 3;

// Whether an MPI launcher (mpirun, srun) started this process. A plain `tessera train` with
// parallel.dp = 1 then never touches MPI, so it starts fast and needs no MPI runtime at all.
bool started_by_mpi_launcher() { return dist::launcher_rank() >= 0 || dist::launcher_size() >= 1; }

void print_result(const train::TrainResult& r) {
  if (r.outcome == train::TrainResult::Outcome::NothingToDo) {
    fmt::print("{}\n", r.stop_reason);
    return;
  }
  if (!r.sample_text.empty()) fmt::print("\nsample:\n{}\n\n", r.sample_text);
  if (r.outcome == train::TrainResult::Outcome::StoppedEarly) {
    fmt::print("stopped at step {}: {}; continue with --checkpoint.resume latest\n", r.steps, r.stop_reason);
  }
  fmt::print("chart:      {}\nmetrics:    {}\ncheckpoint: {}\n", r.chart_path, r.metrics_path,
             r.checkpoint_path.empty() ? std::string("none (checkpoint.at_end = false)") : r.checkpoint_path);
  // The result is the validation loss where the run ended; a stop that skipped the evaluation (a
  // signal asks for a prompt exit) has none to report.
  if (r.val_step == r.steps) {
    fmt::print("RESULT val_loss={:.4f} baseline={:.4f}\n", r.val_loss, r.unigram_entropy);
  } else {
    fmt::print("no validation loss at step {}: the stop skipped the evaluation; the run's RESULT line comes when it "
               "finishes\n", r.steps);
  }
  // Said before anything else can end the process: the run's work is done and saved.
  std::fflush(stdout);
}

void exit_for(const train::TrainResult& r) {
  if (r.outcome == train::TrainResult::Outcome::StoppedEarly) throw CLI::RuntimeError(kStoppedEarly);
}

// A rank that fails prints its error and ends the job. When every rank fails the same way (a bad
// dataset, say), printing it once is enough: rank 0 prints at once and ends the job, the others
// wait a moment first, so they are usually ended before they print; a failure of one rank alone
// is still printed, by that rank.
[[noreturn]] void fail_rank(const dist::MpiRuntime& mpi, const std::exception& e, bool debug) {
  if (mpi.world_rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fmt::print(stderr, "rank {}: {}\n", mpi.world_rank(), describe_error(e, debug));
  std::fflush(stderr);
  mpi.abort_job(1);
}

// Under `tessera launch`, whether every rank of the job has failed, each leaving its outcome in the
// job's folder (this rank's is left here). A setting that only the engine can judge (a recompute
// budget below the least, say) fails every rank at the same point of start-up; then none waits in
// a collective, MPI can be finished normally, and the launcher says the message once, without the
// abort's screen of text. A rank that fails alone is told apart by the wait running out while its
// peers are still busy.
bool every_rank_failed(const dist::MpiRuntime& mpi, const std::exception& e, bool debug) {
  const std::optional<dist::JobStatus> job = dist::JobStatus::of_this_process();
  if (!job) return false;
  job->record_outcome(dynamic_cast<const UsageError*>(&e) != nullptr ? kExitUsage : kExitError,
                      describe_error(e, debug));
  // Ranks reach the same check within moments of each other, unless one is descheduled on a busy
  // machine: a few seconds, paid only on the way out of a failed start.
  constexpr auto kWait = std::chrono::seconds(5);
  const auto until = std::chrono::steady_clock::now() + kWait;
  for (;;) {
    int failed = 0;
    for (const dist::RankOutcome& o : job->outcomes()) failed += o.exit_code != 0 ? 1 : 0;
    if (failed >= mpi.world_size()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// One process per data-parallel rank. MPI lives exactly as long as the inner scope (so `tessera
// launch`, which only builds an mpirun command, never starts it); communicators go before it. The
// result is returned, not acted on: an exit code thrown while MPI is alive would abort the job.
train::TrainResult train_under_mpi(const train::RunConfig& config, const Globals& globals, StopSignals& stop) {
  train::TrainResult r;
  std::exception_ptr failed_everywhere;
  {
    // Until the world exists no watchdog can see a missing rank: the start-up guard covers that.
    std::optional<dist::StartupGuard> guard(std::in_place, config.parallel.timeout_seconds, dist::launcher_rank(),
                                            dist::launcher_size(), dist::JobStatus::of_this_process());
    dist::MpiRuntime mpi;
    try {
      dist::CommOptions options;
      options.timeout_seconds = config.parallel.timeout_seconds;
      auto world = mpi.world(options);
      guard.reset();
      r = train::Trainer(config, world.get(), &stop).run();
      world.reset();
    } catch (const std::exception& e) {
      if (mpi.world_size() == 1) throw;  // reported by main, like any single-process error
      if (!every_rank_failed(mpi, e, globals.debug)) fail_rank(mpi, e, globals.debug);
      failed_everywhere = std::current_exception();
    }
    if (!failed_everywhere && mpi.world_rank() == 0) print_result(r);
  }
  // MPI is finished: main reports the error as it does one found before start-up.
  if (failed_everywhere) std::rethrow_exception(failed_everywhere);
  return r;
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
      "Resume: --checkpoint.resume latest (or auto, or a checkpoint folder).\n"
      "Data parallel + ZeRO: tessera launch -n 4 -- train --config FILE --parallel.dp 4 --parallel.zero_stage 2\n"
      "Exit codes: 0 finished, 1 error, 2 bad command line, 3 stopped early with a checkpoint (train.exit_after,\n"
      "train.max_minutes, SIGINT, SIGTERM, SIGHUP, SIGUSR1).");
  cmd->callback([cmd, config_path, &globals]() {
    // First, before anything starts a thread: the stop signals end the run at the next step boundary
    // with a checkpoint instead of losing the work since the last one. Rank 0 says what a signal did.
    StopSignals stop(StopSignals::Options{.announce = dist::launcher_rank() <= 0});
    if (const auto job = dist::JobStatus::of_this_process()) job->mark(dist::JobStatus::Mark::TakesStopRequests);
    train::RunConfig config;
    try {
      std::error_code ec;
      TS_CHECK(!std::filesystem::is_directory(*config_path, ec), "{}",
               config::describe_folder_given_as_toml(*config_path, "--config"));
      // Under a launcher, a config without parallel.dp takes the processes tp and pp leave.
      config = train::load_run_config(*config_path, parse_overrides(cmd->remaining(), option_names(*cmd)),
                                      std::max(dist::launcher_size(), 1));
      // Before MPI starts: a layout that does not fit the job fails here like any config error.
      if (dist::launcher_size() >= 1) train::check_world_size(config, dist::launcher_size());
    } catch (const std::exception& e) {
      // Every rank of a job reads the same config and usually fails the same way: rank 0 says it
      // at once, and its exit ends the job. A rank that left silently at once could end the job
      // first and take rank 0's message with it; so the others wait, then speak for themselves,
      // which also reports a config that fails on one node alone. Under `tessera launch` the
      // launcher says each different message once (dist/job_status.h).
      if (dist::launcher_rank() > 0 && !dist::JobStatus::of_this_process()) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        fmt::print(stderr, "rank {}: {}\n", dist::launcher_rank(), describe_error(e, globals.debug));
        std::fflush(stderr);
        throw CLI::RuntimeError(dynamic_cast<const UsageError*>(&e) != nullptr ? kExitUsage : kExitError);
      }
      throw;
    }
    if (started_by_mpi_launcher()) {
      exit_for(train_under_mpi(config, globals, stop));
    } else {
      // One process; a config asking for dp > 1 is refused by the trainer, naming the launcher.
      const train::TrainResult r = train::Trainer(config, nullptr, &stop).run();
      print_result(r);
      exit_for(r);
    }
  });
}

}  // namespace tessera::cli
