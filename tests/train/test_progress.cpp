// The progress bar fits the terminal: fields dropped least important first, never wider than the
// terminal less one column; and the real program in a pseudo terminal of 80 columns draws no line
// that would wrap.
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "train/progress.h"

namespace fs = std::filesystem;
using tessera::train::fit_bar_line;
using tessera::train::ProgressFields;

namespace {

const ProgressFields kFields{"step  12/600", "loss 4.1234", "lr 2.00e-03", "gnorm 0.123", "5.3k tok/s",
                             "MFU 45.2%",    "mem 231.0 MiB", "ETA 3m50s"};

TEST(ProgressBar, AWideTerminalShowsEveryField) {
  const std::string line = fit_bar_line(0.5, kFields, 200);
  EXPECT_EQ(line, "[############............] step  12/600 | loss 4.1234 | lr 2.00e-03 | gnorm 0.123 | 5.3k tok/s | "
                  "MFU 45.2% | mem 231.0 MiB | ETA 3m50s");
}

TEST(ProgressBar, NarrowTerminalsDropTheLeastImportantFieldsFirst) {
  const std::string at80 = fit_bar_line(0.5, kFields, 80);
  EXPECT_LE(at80.size(), 79u) << at80;
  EXPECT_EQ(at80.find("gnorm"), std::string::npos) << at80;
  EXPECT_NE(at80.find("ETA 3m50s"), std::string::npos) << at80;
  EXPECT_NE(at80.find("tok/s"), std::string::npos) << at80;
  for (int columns = 1; columns <= 160; ++columns) {
    const std::string line = fit_bar_line(0.5, kFields, columns);
    EXPECT_LE(line.size(), static_cast<size_t>(std::max(columns - 1, 1))) << columns << ": " << line;
    if (columns >= 40) {
      EXPECT_NE(line.find("step  12/600 | loss 4.1234"), std::string::npos) << columns << ": " << line;
    }
  }
  // Gradient norm goes before the learning rate, which goes before the memory and then the ETA.
  const std::string at60 = fit_bar_line(0.5, kFields, 60);
  EXPECT_EQ(at60.find("lr "), std::string::npos) << at60;
  EXPECT_NE(at60.find("ETA"), std::string::npos) << at60;
}

// `tessera train --log.progress bar` in a pseudo terminal 80 columns wide: every redraw fits.
TEST(ProgressBar, TheProgramsBarFitsAnEightyColumnTerminal) {
  const fs::path root = fs::temp_directory_path() / ("tessera_progress_" + std::to_string(::getpid()));
  ASSERT_EQ(tessera::testing::prepare_test_dataset(root.string(), 30000, 300).exit_code, 0);
  const std::string command =
      "exec env OMP_NUM_THREADS=1 " + tessera::testing::tessera_exe() + " train --data.dir " + (root / "data").string() +
      " --train.out_dir " + (root / "run").string() +
      " --model.n_layer 1 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --train.batch_size 2 "
      "--train.micro_batch_size 2 --train.steps 30 --train.eval_every 0 --train.eval_batches 1 "
      "--train.sample_tokens 0 --optim.warmup_steps 2 --log.progress bar --log.every 10 --log.peak_gflops 1000";
  winsize size{};
  size.ws_col = 80;
  size.ws_row = 24;
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, &size);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::unsetenv("COLUMNS");
    ::unsetenv("TESSERA_TERMINAL");
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(terminal, buffer, sizeof buffer);
    if (n <= 0) break;  // EIO once the program has ended
    output.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(terminal);
  fs::remove_all(root);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  // Redraws start with "\r\033[K"; a terminal turns "\n" into "\r\n".
  int bars = 0;
  size_t at = 0;
  while ((at = output.find("\r\033[K", at)) != std::string::npos) {
    at += 4;
    const size_t end = output.find_first_of("\r\n", at);
    const std::string line = output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.empty()) continue;
    ++bars;
    EXPECT_LE(line.size(), 79u) << line;
  }
  EXPECT_GE(bars, 10) << output;
}

}  // namespace
