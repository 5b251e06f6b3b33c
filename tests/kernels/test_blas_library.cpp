// The start line's warning for an OpenBLAS that runs its generic kernels on a CPU with better
// vector units (kernels/cpu/blas_library.h), as a function of the core's name and the CPU's flags.
#include <gtest/gtest.h>

#include "kernels/cpu/blas_library.h"

namespace tessera::kernels {
namespace {

TEST(OpenBlasCore, GenericCoresOnAnAvx512CpuAskForSkylakeX) {
  for (const char* core : {"Prescott", "Core2", "Generic", "prescott", "NEHALEM", "Sandybridge"}) {
    const auto warning = generic_openblas_core_warning(core, {.avx2 = true, .avx512 = true});
    ASSERT_TRUE(warning.has_value()) << core;
    EXPECT_NE(warning->find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << *warning;
    EXPECT_NE(warning->find(core), std::string::npos) << *warning;
    EXPECT_NE(warning->find("AVX-512"), std::string::npos) << *warning;
  }
}

TEST(OpenBlasCore, GenericCoresOnAnAvx2CpuAskForHaswell) {
  const auto warning = generic_openblas_core_warning("Prescott", {.avx2 = true, .avx512 = false});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << *warning;
  EXPECT_EQ(warning->find("SkylakeX"), std::string::npos) << *warning;
}

TEST(OpenBlasCore, NoWarningForAFittingCoreOrACpuWithoutAvx2) {
  for (const char* core : {"Haswell", "SkylakeX", "Zen", "Cooperlake", "SapphireRapids"}) {
    EXPECT_FALSE(generic_openblas_core_warning(core, {.avx2 = true, .avx512 = true}).has_value()) << core;
    EXPECT_FALSE(openblas_core_is_generic(core)) << core;
  }
  EXPECT_FALSE(generic_openblas_core_warning("Prescott", {.avx2 = false, .avx512 = false}).has_value());
}

TEST(OpenBlasCore, TheLinkedLibraryNamesItsCore) {
  EXPECT_FALSE(openblas_core().empty());
  const std::string line = gemm_libraries("");
  EXPECT_NE(line.find("f32 by"), std::string::npos) << line;
  EXPECT_NE(line.find("core " + openblas_core()), std::string::npos) << line;
  EXPECT_NE(gemm_libraries("onednn-bf16").find("16-bit by onednn-bf16"), std::string::npos);
}

}  // namespace
}  // namespace tessera::kernels
