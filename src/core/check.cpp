#include "core/check.h"

#include <cstring>

namespace tessera::detail {

namespace {
const char* short_path(const char* file) {
  // Report paths relative to the tree's src/ so messages do not depend on where the tree was built
  // — which may itself lie under a folder named src: the last one is the tree's.
  const char* last = std::strncmp(file, "src/", 4) == 0 ? file + 4 : nullptr;
  for (const char* at = std::strstr(file, "/src/"); at != nullptr; at = std::strstr(at + 1, "/src/")) last = at + 5;
  return last != nullptr ? last : file;
}
}  // namespace

void fail_check(const char* file, int line, const char* condition, const std::string& message) {
  if (condition != nullptr) {
    throw Error(message, fmt::format("{}:{}: check '{}' failed", short_path(file), line, condition));
  }
  throw Error(message, fmt::format("{}:{}", short_path(file), line));
}

}  // namespace tessera::detail
