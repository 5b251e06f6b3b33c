#pragma once
// What the program says when a command fails. Every exception that leaves a command, tessera's
// own or one from the standard library, a JSON or TOML parser, becomes one line "error: ..." that
// names the file where the exception knows it, so no input ends the program with "terminate
// called". The place in the source (Error::where(), or the C++ type of a foreign exception) is for
// developers and is printed only with --debug.
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessera::cli {

// Exit codes: 0 done, 1 a command failed, 2 the command line itself is wrong (unknown command or
// option, missing or bad value), before any work started.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// A command line that is wrong (an unknown option, say), found by a command's own checks rather
// than by the option parser: it exits with kExitUsage like the parser's errors.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `text` safe to print to a terminal: control bytes (ESC, CR, ...; not newline and tab, which some
// messages use to lay out a list) and bytes that are not well-formed UTF-8 become \xNN; printable
// ASCII and valid UTF-8 stay as they are. Messages quote what users and files give (config values,
// paths, data.json fields), which may be anything.
std::string printable(std::string_view text);

// "error: <message>" (no trailing newline), the message through printable(); with `debug`, a
// second line "  at <where>".
std::string describe_error(const std::exception& e, bool debug);
// The same for an exception that is not a std::exception.
std::string describe_unknown_error();

}  // namespace tessera::cli
