# Data parallelism, ZeRO and pipeline benchmarks; include(parallel.cmake) from bench/CMakeLists.txt.
#   zero_memory        per-rank memory of ZeRO 0-3 at dp 1, 2, 4, 8 (GPT-2 124M), one process
#   zero_step_time     mpirun -n 2: step time ZeRO-3 / DP and the all-reduce time hidden behind backward
#   pipeline_bubble    mpirun -n 2: measured pipeline bubble against the simulator with the measured costs
#   sequence_layout    mpirun -n 2: sequence parallelism's packing copies against its collectives
add_executable(zero_memory ${CMAKE_CURRENT_LIST_DIR}/zero_memory.cpp)
target_link_libraries(zero_memory PRIVATE tessera_options tessera_parallel tessera_io CLI11::CLI11 fmt::fmt)
add_executable(zero_step_time ${CMAKE_CURRENT_LIST_DIR}/zero_step_time.cpp)
target_link_libraries(zero_step_time PRIVATE tessera_options tessera_parallel CLI11::CLI11 fmt::fmt)
# Pipeline parallelism: run by bench/pipeline_bubble.sh under mpirun (one pipeline rank per process).
add_executable(pipeline_bubble ${CMAKE_CURRENT_LIST_DIR}/pipeline_bubble.cpp)
target_link_libraries(pipeline_bubble PRIVATE tessera_options tessera_parallel tessera_plan CLI11::CLI11 fmt::fmt
                      nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX)
# Sequence parallelism: the packing copies of the [B, T, C] layout against the collectives
# (mpirun -n 2 bench/sequence_layout; bench/tensor_parallel.sh runs it).
add_executable(sequence_layout ${CMAKE_CURRENT_LIST_DIR}/sequence_layout.cpp)
target_link_libraries(sequence_layout PRIVATE tessera_options tessera_parallel CLI11::CLI11 fmt::fmt)
