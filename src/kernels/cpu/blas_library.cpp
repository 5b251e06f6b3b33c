#include "kernels/cpu/blas_library.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "kernels/cpu/matmul.h"

namespace tessera::kernels {

CpuVectorFeatures detect_cpu_vector_features() {
  CpuVectorFeatures cpu;
#if defined(__x86_64__) || defined(__i386__)
  cpu.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
  return cpu;
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("unknown");
}

std::string openblas_config() {
  const char* config = openblas_get_config();
  return config != nullptr ? std::string(config) : std::string("OpenBLAS");
}

bool openblas_core_is_generic(std::string_view core) {
  // OpenBLAS's x86 cores whose kernels use at most AVX (its TARGET list, older than Haswell).
  static constexpr std::array<std::string_view, 20> kGeneric = {
      "generic",  "katmai",   "coppermine", "northwood", "prescott",     "banias",    "core2",
      "penryn",   "dunnington", "nehalem",  "atom",      "opteron",      "opteron_sse3", "barcelona",
      "bobcat",   "bulldozer", "piledriver", "steamroller", "sandybridge", "nano"};
  std::string lower(core);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::find(kGeneric.begin(), kGeneric.end(), lower) != kGeneric.end();
}

std::optional<std::string> generic_openblas_core_warning(std::string_view core, CpuVectorFeatures cpu) {
  if (!openblas_core_is_generic(core) || !(cpu.avx2 || cpu.avx512)) return std::nullopt;
  const char* fit = cpu.avx512 ? "SkylakeX" : "Haswell";
  return fmt::format("warning: OpenBLAS runs its generic \"{}\" kernels on this CPU, which has {}: its matrix "
                     "products run several times slower than they could. Set OPENBLAS_CORETYPE={} in the "
                     "environment (tessera measures both libraries and runs its f32 products on the faster, oneDNN "
                     "against a generic OpenBLAS; its f64 ones and a PyTorch or NumPy peer's f32 ones on this "
                     "machine are slowed)",
                     core, cpu.avx512 ? "AVX-512" : "AVX2", fit);
}

std::string gemm_libraries(const std::string& half) {
  return fmt::format("f32 by {}; {}f64 by {} (core {})", float_gemm_name(),
                     half.empty() ? std::string() : fmt::format("16-bit by {}; ", half), openblas_config(),
                     openblas_core());
}

}  // namespace tessera::kernels
