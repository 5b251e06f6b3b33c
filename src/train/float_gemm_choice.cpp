#include "train/float_gemm_choice.h"

#include <fmt/format.h>
#include <omp.h>

#include <array>
#include <ctime>

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
    choice.chosen = setting == config::FloatGemmSetting::OpenBlas ? kernels::FloatGemmLibrary::OpenBlas
                                                                   : kernels::FloatGemmLibrary::OneDnn;
    choice.reason = setting != config::FloatGemmSetting::Auto
                        ? fmt::format("precision.f32_gemm = \"{}\"", config::float_gemm_setting_name(setting))
                        : std::string("the model makes no float product");
    kernels::use_float_gemm_library(choice.chosen);
    return choice;
  }
  const std::string products = describe_problems(problems);
  const std::string key = fmt::format("{} | {} threads | OpenBLAS core {} | {:016x}", host::cpu_model(),
                                      omp_get_max_threads(), kernels::openblas_core(),
                                      static_cast<uint64_t>(XXH3_64bits(products.data(), products.size())));
  const std::filesystem::path file = machine_cache_path("float-gemm.json");
  const nlohmann::json cache = read_machine_cache(file);
  kernels::FloatGemmTimes times;
  std::string where = "measured now";
  if (const auto it = cache.find(key); it != cache.end() && it->is_object() && it->value("onednn_seconds", 0.0) > 0 &&
                                       it->value("openblas_seconds", 0.0) > 0) {
    times.onednn_seconds = it->value("onednn_seconds", 0.0);
    times.openblas_seconds = it->value("openblas_seconds", 0.0);
    times.shapes = static_cast<int>(problems.size());
    where = fmt::format("measured once and stored in {}", file.string());
  } else {
    times = kernels::time_float_gemm_libraries(problems);
    const nlohmann::json entry = {{"onednn_seconds", times.onednn_seconds},
                                  {"openblas_seconds", times.openblas_seconds},
                                  {"products", products},
                                  {"measured_unix_time", static_cast<int64_t>(std::time(nullptr))}};
    // Every rank of a machine measured the same thing; one write is enough, and the file is
    // replaced atomically whichever lands last.
    if ((world == nullptr || world->rank() == 0) && store_in_machine_cache(file, key, entry)) {
      where = fmt::format("measured now and stored in {}", file.string());
    }
  }
  // Seconds in f32 (the communicators' widest float) lose nothing a choice with a 3 % margin reads.
  std::array<float, 2> sums{static_cast<float>(times.onednn_seconds), static_cast<float>(times.openblas_seconds)};
  if (world != nullptr && world->size() > 1) world->all_reduce(std::span<float>(sums), dist::ReduceOp::Sum)->wait();
  const kernels::FloatGemmTimes agreed{sums[0], sums[1], times.shapes};
  choice.chosen = kernels::faster_float_gemm(agreed);
  const double ranks = world != nullptr ? world->size() : 1;
  choice.reason = fmt::format("the faster on this model's {} product shapes with {} thread{}: {:.3f} s a "
                              "microbatch against {:.3f} s by {}{}, {}",
                              times.shapes, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s",
                              (choice.chosen == kernels::FloatGemmLibrary::OneDnn ? sums[0] : sums[1]) / ranks,
                              (choice.chosen == kernels::FloatGemmLibrary::OneDnn ? sums[1] : sums[0]) / ranks,
                              kernels::float_gemm_library_name(choice.chosen == kernels::FloatGemmLibrary::OneDnn
                                                                   ? kernels::FloatGemmLibrary::OpenBlas
                                                                   : kernels::FloatGemmLibrary::OneDnn),
                              ranks > 1 ? ", the mean of the ranks" : "",
                              where);
  kernels::use_float_gemm_library(choice.chosen);
  return choice;
}

}  // namespace tessera::train
