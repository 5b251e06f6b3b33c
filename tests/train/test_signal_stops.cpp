// Fifty stops by SIGINT, SIGTERM and SIGHUP at random moments of a training run — start-up, forward,
// backward, the optimizer step, the gradient reduction, a checkpoint being written — in one
// process and under `tessera launch -n 2`, sometimes delivered twice as a terminal's or a
// scheduler's group signal is. Every stop must end with exit code 3 and a checkpoint equal, file
// for file, to the one an uninterrupted run wrote at that step, and resuming it must continue the
// uninterrupted run bit for bit. A crash, a sanitizer report or a lost checkpoint fails it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fmt/format.h>
#include <random>
#include <thread>
#include <vector>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

// Steps of some tens of milliseconds, a checkpoint after each, so a random moment lands in every
// part of a step and often inside a save.
const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 96 --model.seq_len 64 --train.batch_size 8 "
    "--train.micro_batch_size 4 --train.eval_every 0 --train.eval_batches 1 --train.sample_tokens 0 "
    "--optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000 "
    "--checkpoint.every 1";
constexpr int kSteps = 10;

struct Layout {
  std::string name;
  std::string launcher;  // "" or "launch -n 2 -- "
  std::string keys;
  std::vector<std::string> files;  // the checkpoint files compared byte for byte
  int stops = 0;
};

std::string train_args(const Layout& l, const fs::path& out, const std::string& extra) {
  return l.launcher + "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel +
         " --train.steps " + std::to_string(kSteps) + " " + l.keys + " " + extra;
}

std::string step_folder(int step) { return fmt::format("step_{:08d}", step); }

struct Exit {
  bool exited = false;
  int code = -1;    // when exited
  int signal = 0;   // when not
  std::string how;
};

Exit wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return {true, WEXITSTATUS(status), 0, fmt::format("exit code {}", WEXITSTATUS(status))};
  return {false, -1, WTERMSIG(status),
          fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)))};
}

class SignalStops : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_signal_stops_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 60000, 320);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  // The uninterrupted run, keeping every step's checkpoint; then `stops` runs, each stopped by a
  // signal at a random moment of its life and resumed for one step, against it.
  static void stop_at_random_moments(const Layout& l, uint32_t seed) {
    const fs::path reference = g_root / (l.name + "_reference");
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult whole = run_tessera(train_args(l, reference, "--checkpoint.keep 100"));
    const double lifetime = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    const std::vector<double> reference_losses = train_losses_of((reference / "metrics.jsonl").string());
    ASSERT_EQ(reference_losses.size(), static_cast<size_t>(kSteps));

    std::mt19937 random(seed);
    int stops = 0, finished_first = 0, before_start = 0;
    for (int attempt = 0; stops < l.stops; ++attempt) {
      ASSERT_LT(attempt, 3 * l.stops) << "most runs finished before their signal or ended before they started";
      const fs::path run = g_root / fmt::format("{}_{}", l.name, attempt);
      const fs::path log = g_root / fmt::format("{}_{}.log", l.name, attempt);
      constexpr std::array<int, 3> kStopSignals{SIGINT, SIGTERM, SIGHUP};
      const int signal_number = kStopSignals[static_cast<size_t>(attempt) % kStopSignals.size()];
      const bool twice = random() % 2 == 0;
      const double at = std::uniform_real_distribution<double>(0.0, 0.9)(random) * lifetime;
      const pid_t pid = spawn_tessera(train_args(l, run, "--checkpoint.keep 2"), log.string());
      std::this_thread::sleep_for(std::chrono::duration<double>(at));
      // To the whole process group, as a terminal's Ctrl-C; a second copy a moment later, as a
      // group delivery repeated by a launcher or a scheduler.
      ::kill(-pid, signal_number);
      if (twice) {
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 20));
        ::kill(-pid, signal_number);
      }
      const Exit exit = wait_for(pid);
      const std::string context = fmt::format("{} attempt {}: signal {}{} at {:.3f} s of a {:.3f} s run\n{}", l.name,
                                              attempt, signal_number, twice ? " twice" : "", at, lifetime,
                                              read_file(log.string()));
      // A signal in the first moments of a process, before its main() has blocked it, ends it the
      // usual way: allowed only while it has said nothing yet.
      if (!exit.exited && exit.signal == signal_number && read_file(log.string()).empty()) {
        ++before_start;
        continue;
      }
      const std::vector<double> losses = train_losses_of((run / "metrics.jsonl").string());
      // Likewise at the very end, once the run has finished and said so: its stop handling is gone
      // with it (core/stop_signals.h), and there is nothing left to stop.
      if (!exit.exited && exit.signal == signal_number && losses.size() == static_cast<size_t>(kSteps) &&
          read_file(log.string()).find("RESULT val_loss") != std::string::npos) {
        ++finished_first;
        continue;
      }
      ASSERT_TRUE(exit.exited && (exit.code == 3 || exit.code == 0)) << exit.how << "\n" << context;
      if (exit.code == 0) {  // the run ended before the signal came: not a stop
        ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps)) << context;
        ++finished_first;
        continue;
      }
      ++stops;
      const int step = static_cast<int>(losses.size());
      ASSERT_GE(step, 1) << context;
      ASSERT_LT(step, kSteps) << context;
      // Rank 0 says which signal stopped it, or that another rank's did (it may read its own flag
      // a moment before the signal reaches it).
      EXPECT_TRUE(read_file(log.string()).find("stopped by signal") != std::string::npos ||
                  read_file(log.string()).find("stopped by a signal on another rank") != std::string::npos)
          << context;
      // A signal skips the evaluation: no RESULT line reports a loss that was never measured.
      EXPECT_EQ(read_file(log.string()).find("RESULT val_loss"), std::string::npos) << context;
      EXPECT_EQ(losses, std::vector<double>(reference_losses.begin(), reference_losses.begin() + step)) << context;
      for (const std::string& file : l.files) {
        EXPECT_EQ(read_file((run / "checkpoints" / step_folder(step) / file).string()),
                  read_file((reference / "checkpoints" / step_folder(step) / file).string()))
            << file << " of the stop's checkpoint differs from the uninterrupted run's at step " << step << "\n"
            << context;
      }
      // One more step from the stop's checkpoint: the uninterrupted run's step, bit for bit.
      const CliResult resumed = run_tessera(train_args(l, run, "--checkpoint.keep 2 --checkpoint.resume latest "
                                                               "--train.exit_after 1"));
      ASSERT_EQ(resumed.exit_code, step + 1 == kSteps ? 0 : 3) << resumed.output << context;
      const std::vector<double> after = train_losses_of((run / "metrics.jsonl").string());
      ASSERT_EQ(after.size(), static_cast<size_t>(step + 1)) << resumed.output;
      EXPECT_EQ(after.back(), reference_losses[static_cast<size_t>(step)]) << resumed.output;
      for (const std::string& file : l.files) {
        EXPECT_EQ(read_file((run / "checkpoints" / step_folder(step + 1) / file).string()),
                  read_file((reference / "checkpoints" / step_folder(step + 1) / file).string()))
            << file << " after resuming from step " << step << " differs from the uninterrupted run's\n"
            << resumed.output;
      }
      fs::remove_all(run);
      if (::testing::Test::HasFailure()) return;
    }
    std::printf("%s: %d stops, %d runs finished before their signal, %d ended by it before main()\n",
                l.name.c_str(), stops, finished_first, before_start);
  }
};

TEST_F(SignalStops, OneProcess) {
  stop_at_random_moments({"one_process", "", "", {"model.safetensors", "optimizer.rank00000.safetensors"}, 30}, 1);
}

// Data parallel with ZeRO-1: the signal reaches the launcher, which hands one stop to every rank.
TEST_F(SignalStops, UnderLaunchWithDataParallelZero1) {
  stop_at_random_moments({"dp2_zero1",
                          "launch -n 2 -- ",
                          "--parallel.dp 2 --parallel.zero_stage 1",
                          {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"},
                          20},
                         2);
}

// The processes whose command line names `run` (mpirun and the ranks), by pid; with `ranks_only`,
// the ranks alone.
std::vector<pid_t> processes_of(const fs::path& run, bool ranks_only) {
  std::vector<pid_t> found;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file((e.path() / "cmdline").string());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(run.string()) == std::string::npos) continue;
    if (ranks_only && (cmdline.find("mpirun") != std::string::npos || cmdline.find(" launch ") != std::string::npos)) {
      continue;
    }
    found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

// A long data-parallel run under `tessera launch -n 2`, its folder and log named `name`, started
// and waited for until its ranks train (the first metrics line).
struct LaunchedRun {
  fs::path run, log;
  pid_t launcher = 0;
};
void start_launched_run(const std::string& name, LaunchedRun& out) {
  out.run = g_root / name;
  out.log = g_root / (name + ".log");
  const Layout l{name, "launch -n 2 -- ", "--parallel.dp 2", {}, 0};
  out.launcher = spawn_tessera(train_args(l, out.run, "--train.steps 100000 --checkpoint.every 0"), out.log.string());
  const auto started = std::chrono::steady_clock::now();
  while (train_losses_of((out.run / "metrics.jsonl").string()).empty()) {
    ASSERT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60)) << read_file(out.log.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A rank killed outright says nothing and mpirun ends the others: the launcher says so, and that
// the stop the others announced on mpirun's SIGTERM saved nothing.
TEST_F(SignalStops, AKilledRankIsSaidToHaveEndedTheJobWithoutACheckpoint) {
  LaunchedRun job;
  ASSERT_NO_FATAL_FAILURE(start_launched_run("killed_rank", job));
  const fs::path& run = job.run;
  const fs::path& log = job.log;
  const pid_t pid = job.launcher;
  const std::vector<pid_t> ranks = processes_of(run, true);
  ASSERT_EQ(ranks.size(), 2u) << read_file(log.string());
  ::kill(ranks.back(), SIGKILL);
  const Exit exit = wait_for(pid);
  EXPECT_TRUE(exit.exited && exit.code != 0 && exit.code != 3) << exit.how << "\n" << read_file(log.string());
  EXPECT_NE(read_file(log.string()).find("ended: a rank was killed (mpirun names it above)"), std::string::npos)
      << read_file(log.string());
}

// A launcher killed outright (SIGKILL hands nothing on) takes its job with it: mpirun is told to
// end the ranks, rather than leaving them to train on as orphans that hold the run folder's lock.
TEST_F(SignalStops, AKilledLauncherLeavesNoRankRunning) {
  LaunchedRun job;
  ASSERT_NO_FATAL_FAILURE(start_launched_run("killed_launcher", job));
  const fs::path& run = job.run;
  const fs::path& log = job.log;
  const pid_t pid = job.launcher;
  ::kill(pid, SIGKILL);
  wait_for(pid);
  const auto killed = std::chrono::steady_clock::now();
  while (!processes_of(run, false).empty() && std::chrono::steady_clock::now() - killed < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(processes_of(run, false).empty()) << "the job's processes outlived their launcher by 20 s\n"
                                                << read_file(log.string());
}

}  // namespace
