#pragma once
// Error reporting for all of tessera. Library code never exits: it throws tessera::Error with a
// message that names the problem, the values involved, and where the check lives (file:line).
// Checks stay on in release builds: a wrong shape caught early beats a silent wrong answer.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void fail_check(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace tessera

// TS_CHECK(cond, "format {}", args...): throws tessera::Error naming file:line, the failed
// condition and the formatted message.
#define TS_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::tessera::detail::fail_check(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__));   \
    }                                                                                         \
  } while (0)

// TS_FAIL("format {}", args...): unconditional failure with the same message shape.
#define TS_FAIL(...) ::tessera::detail::fail_check(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))
