# The distributed runtime's benchmark; include(dist.cmake) from bench/CMakeLists.txt.
# Run: mpirun -n 2 --bind-to none bench/comm_overlap (see the header of comm_overlap.cpp).
add_executable(comm_overlap ${CMAKE_CURRENT_LIST_DIR}/comm_overlap.cpp)
target_link_libraries(comm_overlap PRIVATE tessera_options tessera_dist tessera_blas CLI11::CLI11 fmt::fmt
                      OpenMP::OpenMP_CXX)
