#pragma once
// What the program says when a command fails. Every exception that leaves a command, tessera's
// own or one from the standard library, a JSON or TOML parser, becomes one line "error: ..." that
// names the file where the exception knows it, so no input ends the program with "terminate
// called". The place in the source (Error::where(), or the C++ type of a foreign exception) is for
// developers and is printed only with --debug.
#include <exception>
#include <string>

namespace tessera::cli {

// Exit codes: 0 done, 1 a command failed, 2 the command line itself is wrong (unknown command or
// option, missing or bad value), before any work started.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// "error: <message>" (no trailing newline); with `debug`, a second line "  at <where>".
std::string describe_error(const std::exception& e, bool debug);
// The same for an exception that is not a std::exception.
std::string describe_unknown_error();

}  // namespace tessera::cli
