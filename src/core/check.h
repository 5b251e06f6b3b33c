#pragma once
// Error reporting for all of tessera. Library code never exits: it throws tessera::Error with a
// message that names the problem, the values involved and the fix, and separately where the check
// lives (file:line and the failed condition), which the program prints only when asked (--debug):
// a user needs the message, a developer the place. Checks stay on in release builds: a wrong shape
// caught early beats a silent wrong answer.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  // "nn/gpt.cpp:42: check 'x > 0' failed", or empty for an error raised without a check.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
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
