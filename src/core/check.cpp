#include "core/check.h"

#include <cstring>

namespace tessera::detail {

namespace {
const char* short_path(const char* file) {
  // Report paths relative to src/ so messages do not depend on where the tree was built.
  const char* src = std::strstr(file, "src/");
  return src != nullptr ? src + 4 : file;
}
}  // namespace

void fail_check(const char* file, int line, const char* condition, const std::string& message) {
  if (condition != nullptr) {
    throw Error(message, fmt::format("{}:{}: check '{}' failed", short_path(file), line, condition));
  }
  throw Error(message, fmt::format("{}:{}", short_path(file), line));
}

}  // namespace tessera::detail
