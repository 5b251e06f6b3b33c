#include "train/float_gemm_choice.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <optional>
#include <span>

#include <xxhash.h>

#include "core/host.h"
#include "kernels/cpu/blas_library.h"
#include "train/machine_cache.h"

namespace tessera::train {

std::vector<kernels::GemmProblem> model_gemm_problems(const nn::GPT& model, int64_t tokens) {
  std::vector<kernels::GemmProblem> problems;
  for (const Shape& weight : model.linear_weight_shapes()) {
    kernels::add_linear_layer(problems, weight[0], weight[1], tokens);
  }
  return problems;
}

namespace {

// The products in the cache's key: a run of another shape measures its own.
std::string describe_problems(const std::vector<kernels::GemmProblem>& problems) {
  std::string text;
  for (const kernels::GemmProblem& p : problems) {
    text += fmt::format("{}{}x{}x{}{}{}*{:g}", text.empty() ? "" : " ", p.M, p.N, p.K,
                        p.ta == kernels::Transpose::Yes ? "T" : "N", p.tb == kernels::Transpose::Yes ? "T" : "N",
                        p.count);
  }
  return text;
}

}  // namespace

FloatGemmChoice choose_float_gemm(config::FloatGemmSetting setting, const std::vector<kernels::GemmProblem>& problems,
                                  dist::Communicator* world) {
  FloatGemmChoice choice;
  if (setting != config::FloatGemmSetting::Auto || problems.empty()) {
    choice.chosen.provider = setting == config::FloatGemmSetting::OpenBlas ? kernels::FloatGemmLibrary::OpenBlas
                                                                          : kernels::FloatGemmLibrary::OneDnn;
    choice.reason = setting != config::FloatGemmSetting::Auto
                        ? fmt::format("precision.f32_gemm = \"{}\"", config::float_gemm_setting_name(setting))
                        : std::string("the model makes no float product");
    kernels::use_float_gemm(choice.chosen);
    return choice;
  }
  const std::string products = describe_problems(problems);
  const std::string key = fmt::format("{} | {} threads | OpenBLAS core {} | {:016x}", host::cpu_model(),
                                      omp_get_max_threads(), kernels::openblas_core(),
                                      static_cast<uint64_t>(XXH3_64bits(products.data(), products.size())));
  const std::filesystem::path file = machine_cache_path("float-gemm.json");
  const nlohmann::json cache = read_machine_cache(file);
  // An entry holds every candidate's seconds by name; one without all of them (an older kind, a
  // damaged one) is measured again.
  auto stored_times = [&]() -> std::optional<kernels::FloatGemmTimes> {
    const auto it = cache.find(key);
    if (it == cache.end() || !it->is_object() || !it->contains("seconds") || !(*it)["seconds"].is_object()) {
      return std::nullopt;
    }
    kernels::FloatGemmTimes times;
    times.shapes = static_cast<int>(problems.size());
    const nlohmann::json& seconds = (*it)["seconds"];
    for (size_t i = 0; i < kernels::kFloatGemmCandidates.size(); ++i) {
      const auto value = seconds.find(kernels::float_gemm_name(kernels::kFloatGemmCandidates[i]));
      if (value == seconds.end() || !value->is_number()) return std::nullopt;
      times.seconds[i] = value->get<double>();
      // Nothing a microbatch's products take (an edited or damaged file): measured again.
      constexpr double kMostSeconds = 1e5;
      if (!(times.seconds[i] > 0 && times.seconds[i] <= kMostSeconds)) return std::nullopt;
    }
    return times;
  };
  kernels::FloatGemmTimes times;
  std::string where = "measured now";
  const std::optional<kernels::FloatGemmTimes> stored = stored_times();
  if (stored) {
    times = *stored;
    where = fmt::format("measured once and stored in {}", file.string());
  } else {
    times = kernels::time_float_gemms(problems);
  }
  // Seconds in f32 (the communicators' widest float) lose nothing a choice with a 3 % margin reads.
  std::array<float, kernels::kFloatGemmCandidates.size()> sums;
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = static_cast<float>(times.seconds[i]);
  if (world != nullptr && world->size() > 1) world->all_reduce(std::span<float>(sums), dist::ReduceOp::Sum)->wait();
  const double ranks = world != nullptr ? world->size() : 1;
  kernels::FloatGemmTimes agreed;
  for (size_t i = 0; i < sums.size(); ++i) agreed.seconds[i] = sums[i] / ranks;
  if (!stored) {
    // What is stored is what the ranks agreed on, not one rank's own times: a later run (a resume)
    // reads it back and must choose what this one chose.
    nlohmann::json seconds = nlohmann::json::object();
    for (size_t i = 0; i < kernels::kFloatGemmCandidates.size(); ++i) {
      seconds[kernels::float_gemm_name(kernels::kFloatGemmCandidates[i])] = agreed.seconds[i];
    }
    const nlohmann::json entry = {{"seconds", seconds},
                                  {"products", products},
                                  {"measured_unix_time", static_cast<int64_t>(std::time(nullptr))}};
    // Every rank of a machine holds the same figures; one write is enough, and the file is
    // replaced atomically whichever lands last.
    if ((world == nullptr || world->rank() == 0) && store_in_machine_cache(file, key, entry)) {
      where = fmt::format("measured now and stored in {}", file.string());
    }
  }
  choice.chosen = kernels::fastest_float_gemm(agreed);
  std::string others;
  for (size_t i = 0; i < kernels::kFloatGemmCandidates.size(); ++i) {
    if (kernels::kFloatGemmCandidates[i] == choice.chosen) continue;
    others += fmt::format("{}{:.3f} s by {}", others.empty() ? "" : ", ", agreed.seconds[i],
                          kernels::float_gemm_name(kernels::kFloatGemmCandidates[i]));
  }
  const size_t chosen_at = static_cast<size_t>(
      std::find(kernels::kFloatGemmCandidates.begin(), kernels::kFloatGemmCandidates.end(), choice.chosen) -
      kernels::kFloatGemmCandidates.begin());
  choice.reason = fmt::format("the fastest on this model's {} product shapes with {} thread{}: {:.3f} s a "
                              "microbatch against {}{}, {}",
                              times.shapes, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s",
                              agreed.seconds[chosen_at], others, ranks > 1 ? ", the mean of the ranks" : "", where);
  kernels::use_float_gemm(choice.chosen);
  return choice;
}

}  // namespace tessera::train
