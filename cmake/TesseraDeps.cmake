# Every dependency is a Debian package, installed by scripts/install-deps.sh.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
# COIN-OR CBC (with CoinUtils, Osi and Clp): the MILP and LP solver of memory/remat (Checkmate).
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)

# OpenBLAS with its OpenMP threading: sgemm shares the OpenMP thread pool with our kernels
# instead of oversubscribing the cores with a second pool.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-openmp
          PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
find_library(OPENBLAS_LIBRARY NAMES openblas
             PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-openmp-dev (scripts/install-deps.sh does)")
endif()
add_library(tessera_blas INTERFACE)
target_include_directories(tessera_blas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(tessera_blas INTERFACE ${OPENBLAS_LIBRARY})

# oneDNN: its matmul primitive is the bf16 GEMM where the CPU has bf16 dot products
# (kernels/cpu/gemm_bf16.h); Debian's OpenBLAS has none. Found by hand: Debian's dnnl-config.cmake
# insists on OpenCL headers for a GPU runtime tessera does not use.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY NAMES dnnl)
if(NOT DNNL_INCLUDE_DIR OR NOT DNNL_LIBRARY)
  message(FATAL_ERROR "oneDNN not found: install libdnnl-dev (scripts/install-deps.sh does)")
endif()
add_library(tessera_dnnl INTERFACE)
target_include_directories(tessera_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(tessera_dnnl INTERFACE ${DNNL_LIBRARY})

if(TESSERA_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

find_program(TESSERA_TORCH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
