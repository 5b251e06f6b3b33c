// The MFU peak: stored once per machine, thread count and float GEMM library, and measured again
// where the stored figure belongs to another library.
#include <gtest/gtest.h>
#include <unistd.h>

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

TEST_F(PeakFlops, AFigureStoredBeforeTheGemmLibraryChangedIsMeasuredAgain) {
  // The key of a build whose float GEMM was another library's (it named none).
  store(fmt::format("{} | 1 threads", host::cpu_model()), 7.0);
  const train::MatmulPeak peak = train::matmul_peak(0, 1);
  EXPECT_GT(peak.flops, 0.0);
  EXPECT_NE(peak.flops, 7e9);
  EXPECT_EQ(peak.source.find("calibrated once"), std::string::npos) << peak.source;
}
