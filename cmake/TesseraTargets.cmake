# Shared compile settings and helpers for the project's own targets.
add_library(tessera_options INTERFACE)
target_compile_options(tessera_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter
  # Nothing reads errno after math calls; without it sqrt and friends vectorize.
  -fno-math-errno
  $<$<CONFIG:Release>:-O3>
  $<$<CONFIG:RelWithDebInfo>:-O2>)
if(TESSERA_NATIVE)
  target_compile_options(tessera_options INTERFACE -march=native)
endif()
if(TESSERA_SANITIZE)
  target_compile_options(tessera_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(tessera_options INTERFACE -fsanitize=address,undefined)
endif()
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with the fuzz preset")
  endif()
  # Every library is instrumented for coverage and checked by ASan and UBSan; only the fuzz
  # targets themselves link libFuzzer's main (tests/fuzz).
  target_compile_options(tessera_options INTERFACE -fsanitize=fuzzer-no-link,address,undefined
                         -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(tessera_options INTERFACE -fsanitize=address,undefined)
endif()
target_include_directories(tessera_options INTERFACE ${PROJECT_SOURCE_DIR}/src)

# tessera_library(NAME DIR <dir> DEPS <targets...> [EXCLUDE <subdirs...>]): a static library from
# every .cpp under DIR but those under the EXCLUDEd subfolders (which build a target of their own,
# e.g. one with a dependency the rest of the folder must not pull into every binary).
function(tessera_library name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${ARG_DIR}/*.cpp)
  foreach(sub IN LISTS ARG_EXCLUDE)
    list(FILTER sources EXCLUDE REGEX "^${ARG_DIR}/${sub}/")
  endforeach()
  if(sources)
    add_library(${name} STATIC ${sources})
    target_link_libraries(${name} PUBLIC tessera_options ${ARG_DEPS})
  else()
    # A part not written yet: an empty interface keeps the dependency graph in place.
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE tessera_options ${ARG_DEPS})
  endif()
endfunction()

# tessera_test(NAME SOURCES <files...> DEPS <targets...> [LABELS <labels...>]): a GoogleTest
# executable whose cases become ctest tests.
function(tessera_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tessera_options ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # One environment entry only: a second would need a ';' that the property list would split.
  set(properties TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ${properties})
endfunction()
