#include "cli/this_tessera.h"

#include <filesystem>

#include "core/check.h"

namespace tessera::cli {

std::string this_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  TS_CHECK(!ec, "cannot find the running tessera executable through /proc/self/exe: {}", ec.message());
  return path.string();
}

std::vector<std::string> this_tessera_with(const std::vector<std::string>& args) {
  std::vector<std::string> words = {this_executable()};
  words.insert(words.end(), args.begin(), args.end());
  return words;
}

}  // namespace tessera::cli
