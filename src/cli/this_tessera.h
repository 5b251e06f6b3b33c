#pragma once
// The running tessera executable, for the commands that start it again: `launch` on every rank, and
// the calibrations' measuring runs.
#include <string>
#include <vector>

namespace tessera::cli {

// Its path, through /proc/self/exe (Linux).
std::string this_executable();
// Its command line with `args`: {this_executable(), args...}.
std::vector<std::string> this_tessera_with(const std::vector<std::string>& args);

}  // namespace tessera::cli
