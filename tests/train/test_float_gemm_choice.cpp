// precision.f32_gemm (train/float_gemm_choice.h): the products a model's step makes, a library
// given by the config, and "auto" measuring once per machine and model shape, then reading the
// stored times back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "kernels/cpu/matmul.h"
#include "train/float_gemm_choice.h"
#include "train/machine_cache.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

class FloatGemmChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_float_gemm_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ::setenv("TESSERA_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    kernels::use_float_gemm(before_);
    ::unsetenv("TESSERA_CACHE_DIR");
    fs::remove_all(dir_);
  }
  nlohmann::json cache() const { return train::read_machine_cache(dir_ / "float-gemm.json"); }
  void write(const nlohmann::json& json) const { std::ofstream(dir_ / "float-gemm.json") << json.dump(); }

  fs::path dir_;
  kernels::FloatGemm before_ = kernels::float_gemm();
};

config::ModelConfig small_model(bool tied) {
  config::ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.vocab_size = 96;
  c.seq_len = 16;
  c.tied_embeddings = tied;
  return c;
}

// How many products of M x N x K a step makes, whatever their transposes.
double count_of(const std::vector<kernels::GemmProblem>& problems, int64_t M, int64_t N, int64_t K) {
  double count = 0;
  for (const kernels::GemmProblem& p : problems) {
    if (p.M == M && p.N == N && p.K == K) count += p.count;
  }
  return count;
}

}  // namespace

TEST_F(FloatGemmChoice, TheProductsAreEveryLinearLayersAndTheHeadsOnce) {
  for (bool tied : {true, false}) {
    MemoryAccountant memory;
    nn::GPT model(small_model(tied), memory, 3);
    const std::vector<kernels::GemmProblem> problems = train::model_gemm_problems(model, 32);
    // qkv [192, 64], attention out [64, 64], MLP [256, 64] and [64, 256] in each of 2 blocks; the head [96, 64].
    EXPECT_EQ(count_of(problems, 32, 192, 64), 2) << "qkv forward, tied " << tied;
    EXPECT_EQ(count_of(problems, 32, 64, 192), 2) << "qkv input gradient";
    EXPECT_EQ(count_of(problems, 192, 64, 32), 2) << "qkv weight gradient";
    EXPECT_EQ(count_of(problems, 32, 64, 64), 4) << "attention out: forward and input gradient";
    EXPECT_EQ(count_of(problems, 32, 256, 64), 4) << "MLP fc forward, MLP proj input gradient";
    EXPECT_EQ(count_of(problems, 32, 96, 64), 1) << "the head, tied or not, once";
    EXPECT_EQ(count_of(problems, 96, 64, 32), 1) << "the head's weight gradient";
    EXPECT_EQ(count_of(problems, 32, 16, 64), 0) << "the position table multiplies nothing";
    double products = 0;
    for (const kernels::GemmProblem& p : problems) products += p.count;
    EXPECT_EQ(products, 3 * (4 * 2 + 1));
  }
}

TEST_F(FloatGemmChoice, ALibraryTheConfigNamesIsTakenWithoutMeasuring) {
  const std::vector<kernels::GemmProblem> problems{{64, 64, 64}};
  for (auto [setting, library] : {std::pair{config::FloatGemmSetting::OpenBlas, kernels::FloatGemmLibrary::OpenBlas},
                                  std::pair{config::FloatGemmSetting::OneDnn, kernels::FloatGemmLibrary::OneDnn}}) {
    const train::FloatGemmChoice choice = train::choose_float_gemm(setting, problems, nullptr);
    EXPECT_EQ(choice.chosen.provider, library);
    EXPECT_EQ(choice.chosen.block, kernels::kNarrowGemmBlock);
    EXPECT_EQ(kernels::float_gemm(), choice.chosen);
    EXPECT_NE(choice.reason.find("precision.f32_gemm"), std::string::npos) << choice.reason;
  }
  EXPECT_FALSE(fs::exists(dir_ / "float-gemm.json"));
}

TEST_F(FloatGemmChoice, AutoMeasuresOnceAndTakesTheStoredTimesAfterwards) {
  std::vector<kernels::GemmProblem> problems;
  kernels::add_linear_layer(problems, 128, 64, 64);
  const train::FloatGemmChoice first = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(first.reason.find("measured now and stored"), std::string::npos) << first.reason;
  EXPECT_EQ(kernels::float_gemm(), first.chosen);
  nlohmann::json stored = cache();
  ASSERT_EQ(stored.size(), 1u) << stored.dump();
  const std::string key = stored.begin().key();
  for (kernels::FloatGemm gemm : kernels::kFloatGemmCandidates) {
    ASSERT_GT(stored[key]["seconds"][kernels::float_gemm_name(gemm)].get<double>(), 0) << stored.dump();
  }

  // The stored times decide from now on, whichever way they point, with the margin for a near tie.
  auto store = [&](double narrow_onednn, double narrow_openblas, double wide_onednn, double wide_openblas) {
    stored[key]["seconds"] = {{"onednn-sgemm", narrow_onednn},
                              {"openblas-sgemm", narrow_openblas},
                              {"onednn-sgemm/1024", wide_onednn},
                              {"openblas-sgemm/1024", wide_openblas}};
    write(stored);
  };
  store(2.0, 1.0, 3.0, 3.0);
  train::FloatGemmChoice again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_EQ(again.chosen, (kernels::FloatGemm{kernels::FloatGemmLibrary::OpenBlas, kernels::kNarrowGemmBlock}));
  EXPECT_EQ(kernels::float_gemm(), again.chosen);
  EXPECT_NE(again.reason.find("stored in"), std::string::npos) << again.reason;
  EXPECT_NE(again.reason.find("1.000 s a microbatch against 2.000 s by onednn-sgemm, 3.000 s by onednn-sgemm/1024"),
            std::string::npos)
      << again.reason;
  store(2.0, 1.99, 2.5, 2.5);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_EQ(again.chosen, kernels::FloatGemm{}) << again.reason;
  store(2.0, 1.5, 1.0, 1.2);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_EQ(again.chosen, (kernels::FloatGemm{kernels::FloatGemmLibrary::OneDnn, kernels::kWideGemmBlock}))
      << again.reason;
  EXPECT_EQ(kernels::float_gemm_name(), "onednn-sgemm/1024");

  // An entry of an older kind (one time per library) is measured again.
  stored[key] = {{"onednn_seconds", 1.0}, {"openblas_seconds", 2.0}};
  write(stored);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(again.reason.find("measured now"), std::string::npos) << again.reason;
  EXPECT_TRUE(cache()[key].contains("seconds"));

  // Another model shape is measured and stored beside it.
  std::vector<kernels::GemmProblem> other;
  kernels::add_linear_layer(other, 128, 64, 32);
  train::choose_float_gemm(config::FloatGemmSetting::Auto, other, nullptr);
  EXPECT_EQ(cache().size(), 2u);

  // A damaged entry, a time that is no number, is measured again (and replaced), never an error.
  stored = cache();
  stored[key]["seconds"]["openblas-sgemm"] = "fast";
  write(stored);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(again.reason.find("measured now"), std::string::npos) << again.reason;
  EXPECT_TRUE(cache()[key]["seconds"]["openblas-sgemm"].is_number()) << cache().dump();
  stored = cache();
  stored[key]["seconds"]["onednn-sgemm/1024"] = 1e308;
  write(stored);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(again.reason.find("measured now"), std::string::npos) << again.reason;
  EXPECT_EQ(again.reason.find("inf s"), std::string::npos) << again.reason;
  stored = cache();
  stored[key]["seconds"]["onednn-sgemm"] = nullptr;
  write(stored);
  again = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(again.reason.find("measured now"), std::string::npos) << again.reason;

  // A damaged file is measured again, never an error.
  std::ofstream(dir_ / "float-gemm.json") << "{ not json";
  const train::FloatGemmChoice remeasured = train::choose_float_gemm(config::FloatGemmSetting::Auto, problems, nullptr);
  EXPECT_NE(remeasured.reason.find("measured now"), std::string::npos) << remeasured.reason;
}
