#pragma once
// Which GEMM library serves which precision, and whether OpenBLAS runs the kernels this CPU
// deserves. Debian's OpenBLAS picks its kernels by CPU model at load time, and on a CPU it does not
// know (a Xeon with AMX, measured: docs/benchmarks.md) it falls back to its generic "Prescott"
// kernels at a sixth of the speed its Haswell or SkylakeX kernels reach; OPENBLAS_CORETYPE tells
// it which to use. tessera's f32 products run on whichever of oneDNN and this OpenBLAS measured
// faster (kernels/cpu/gemm_choice.h), its f64 ones (references in tests) on OpenBLAS; a PyTorch or
// NumPy peer on the same machine runs its f32 products on this OpenBLAS, so the start line says so
// whichever library tessera uses.
#include <optional>
#include <string>
#include <string_view>

namespace tessera::kernels {

// The CPU's vector instructions that OpenBLAS's x86 kernels need.
struct CpuVectorFeatures {
  bool avx2 = false;    // AVX2 with FMA: the Haswell kernels
  bool avx512 = false;  // AVX-512 F, CD, BW, DQ and VL: the SkylakeX kernels
};
// This CPU's, as the compiler's run-time CPU detection (__builtin_cpu_supports) reports them.
CpuVectorFeatures detect_cpu_vector_features();

// openblas_get_corename(), "Haswell", "Prescott", ...
std::string openblas_core();
// openblas_get_config(), "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64".
std::string openblas_config();

// Whether `core` is one of OpenBLAS's kernels that predate AVX2 ("Prescott", "Core2", "Generic",
// "Nehalem", "Sandybridge", ...; case does not matter).
bool openblas_core_is_generic(std::string_view core);
// The warning for OpenBLAS running a generic core on a CPU with AVX2 or AVX-512, naming the
// OPENBLAS_CORETYPE that fits (SkylakeX with AVX-512, else Haswell); none when the core is not
// generic or the CPU has neither.
std::optional<std::string> generic_openblas_core_warning(std::string_view core, CpuVectorFeatures cpu);

// "f32 by openblas-sgemm; 16-bit by <half>; f64 by OpenBLAS 0.3.21 ... (core Haswell)": the start
// line's GEMM libraries. `half`: the 16-bit path's description, empty when the run has none.
std::string gemm_libraries(const std::string& half);

}  // namespace tessera::kernels
