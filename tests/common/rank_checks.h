#pragma once
// Checks for tests that run under mpirun without GoogleTest: each rank counts its failures and
// prints them with its rank, and the test's main returns non-zero when any rank failed.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::testing {

struct RankChecks {
  int rank = 0;
  int failures = 0;
  int passed = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) {
      ++passed;
      return;
    }
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
  template <class T>
  void expect_eq(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    if (got.size() != want.size()) return expect(false, fmt::format("{}: {} elements, want {}", what, got.size(), want.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(got[i] == want[i])) {
        return expect(false, fmt::format("{}: element {} is {}, want {}", what, i, got[i], want[i]));
      }
    }
    expect(true, what);
  }
  // Expects `fn` to throw tessera::Error with `needle` in its message.
  template <class F>
  void expect_error(F&& fn, const std::string& needle, const std::string& what) {
    try {
      fn();
    } catch (const Error& e) {
      const std::string msg = e.what();
      return expect(msg.find(needle) != std::string::npos, fmt::format("{}: message '{}' lacks '{}'", what, msg, needle));
    }
    expect(false, what + ": no error");
  }
};

}  // namespace tessera::testing
