# MPI (OpenMPI from Debian's openmpi-bin / libopenmpi-dev) and multi-rank tests under ctest.
find_package(MPI REQUIRED COMPONENTS CXX)
if(NOT MPIEXEC_EXECUTABLE)
  message(FATAL_ERROR "mpirun not found: install openmpi-bin (scripts/install-deps.sh does)")
endif()

# Flags for every test job: ranks may exceed the cores (oversubscribe), each rank runs its own
# threads (no binding), shared memory only (works in containers without a network), one OpenMP
# thread per rank so oversubscribed ranks do not fight over the cores.
set(TESSERA_MPIRUN_FLAGS --oversubscribe --bind-to none --mca btl self,vader -x OMP_NUM_THREADS=1)
# OpenMPI refuses to run as root unless told; containers often run as root. In sanitizer builds,
# leak checking is off for MPI jobs: OpenMPI keeps allocations past MPI_Finalize (many in plugins
# it has unloaded, so no suppression can name them); tessera's own code is leak-checked by the
# tests that run without MPI. Memory errors are still caught.
set(TESSERA_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")

# tessera_mpi_test(NAME <name> RANKS <n> COMMAND <exe> [args...] [TIMEOUT s] [LAUNCHER <cmd> [args...]]
#                  [LABELS <labels...>])
# A ctest test that runs `mpirun -n <n> <flags> <exe> <args>`. Every such test has a hard timeout
# (default 60 s), and fails if any rank fails or hangs. LAUNCHER prefixes the mpirun command with
# a wrapper (e.g. a script that expects the job to fail and checks for orphans). <exe> may be a
# target name.
function(tessera_mpi_test)
  cmake_parse_arguments(ARG "" "NAME;RANKS;TIMEOUT" "COMMAND;LAUNCHER;LABELS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_RANKS OR NOT ARG_COMMAND)
    message(FATAL_ERROR "tessera_mpi_test needs NAME, RANKS and COMMAND")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  list(POP_FRONT ARG_COMMAND exe)
  if(TARGET ${exe})
    set(exe $<TARGET_FILE:${exe}>)
  endif()
  add_test(NAME ${ARG_NAME}
           COMMAND ${ARG_LAUNCHER} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ARG_RANKS} ${TESSERA_MPIRUN_FLAGS}
                   ${exe} ${ARG_COMMAND})
  # Set one by one: list-valued properties would merge with the others in a single call.
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT} PROCESSORS ${ARG_RANKS})
  set_tests_properties(${ARG_NAME} PROPERTIES ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
  if(ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
