// The MFU peak: stored once per machine, thread count and float GEMM library, only from a quiet
// machine, and measured again where the stored figure belongs to another library.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/host.h"
#include "kernels/cpu/matmul.h"
#include "train/peak_flops.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

class PeakFlops : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_peak_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ::setenv("TESSERA_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("TESSERA_CACHE_DIR");
    fs::remove_all(dir_);
  }
  void store(const std::string& key, double gflops) {
    std::ofstream(dir_ / "peak-flops.json") << nlohmann::json{{key, {{"gflops", gflops}}}}.dump();
  }
  fs::path dir_;
};

}  // namespace

TEST_F(PeakFlops, TheConfiguredFigureWins) {
  const train::MatmulPeak peak = train::matmul_peak(123.0, 1);
  EXPECT_DOUBLE_EQ(peak.flops, 123e9);
  EXPECT_EQ(peak.source, "log.peak_gflops");
}

TEST_F(PeakFlops, AFigureStoredForThisMachineThreadsAndGemmIsUsed) {
  store(fmt::format("{} | 1 threads | {}", host::cpu_model(), kernels::float_gemm_name()), 7.0);
  const train::MatmulPeak peak = train::matmul_peak(0, 1);
  EXPECT_DOUBLE_EQ(peak.flops, 7e9);
  EXPECT_NE(peak.source.find("calibrated once"), std::string::npos) << peak.source;
}

// A stored figure no process reaches (an edited or damaged file) is measured again, not believed.
TEST_F(PeakFlops, AnImpossibleStoredFigureIsMeasuredAgain) {
  for (const double gflops : {1e-300, 0.0, -5.0, 1e300}) {
    store(fmt::format("{} | 1 threads | {}", host::cpu_model(), kernels::float_gemm_name()), gflops);
    const train::MatmulPeak peak = train::matmul_peak(0, 1);
    EXPECT_GT(peak.flops, 1e7) << gflops;
    EXPECT_LT(peak.flops, 1e15) << gflops;
    EXPECT_EQ(peak.source.find("calibrated once"), std::string::npos) << gflops << ": " << peak.source;
  }
}

TEST_F(PeakFlops, AFigureStoredBeforeTheGemmLibraryChangedIsMeasuredAgain) {
  // The key of a build whose float GEMM was another library's (it named none).
  store(fmt::format("{} | 1 threads", host::cpu_model()), 7.0);
  const train::MatmulPeak peak = train::matmul_peak(0, 1);
  EXPECT_GT(peak.flops, 0.0);
  EXPECT_NE(peak.flops, 7e9);
  EXPECT_EQ(peak.source.find("calibrated once"), std::string::npos) << peak.source;
}

// A measurement while other processes keep the cores busy stands for a slower machine: it is used
// for this run and not stored, even before the load average shows the other work.
TEST_F(PeakFlops, AMeasurementWhileOtherProcessesRunIsNotStored) {
  std::vector<pid_t> spinners;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < cores; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      volatile double x = 1;
      while (std::chrono::steady_clock::now() < end) x = x * 1.0000001 + 1e-9;
      ::_exit(0);
    }
    spinners.push_back(pid);
  }
  const train::MatmulPeak peak = train::matmul_peak(0, 1);
  for (pid_t pid : spinners) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_GT(peak.flops, 0.0);
  EXPECT_NE(peak.source.find("not stored"), std::string::npos) << peak.source;
  EXPECT_FALSE(fs::exists(dir_ / "peak-flops.json"));
}
