#pragma once
// The values a config key accepts, declared with the key (config/model_keys.h, and the run config's
// table, train/config_keys.h), and the refusal of a value outside them.
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "core/check.h"

namespace tessera::config {

// Without a message the refusal is check_range's ("'k' = v is out of range; it must be in [lo, hi]",
// for integer keys); a message is the key's own sentence, where {key} stands for the dotted key and
// {value} for the value.
struct Range {
  double low = 0;
  double high = 0;
  bool low_open = false;
  bool high_open = false;
  std::string_view message = {};
};
// Bounds for Range: a count of steps (2^40: far past any run, far inside every integer type), any
// finite number, and no bound at all (infinity passes).
inline constexpr double kSteps = 1099511627776.0;
inline constexpr double kFinite = std::numeric_limits<double>::max();
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// A float key's value as the config writes it back: the shortest decimal that reads back as the same
// float, so 1e-3f is written 0.001 rather than 0.0010000000474974513.
inline double shortest_decimal(float f) { return std::stod(fmt::format("{}", f)); }

// Whether `value` lies in `range`; nan never does.
template <class T>
bool in_range(T value, const Range& range) {
  const double v = static_cast<double>(value);
  return (range.low_open ? v > range.low : v >= range.low) && (range.high_open ? v < range.high : v <= range.high);
}

// Refuses a value of `key` outside `range`, in the range's words.
template <class T>
void check_in_range(std::string_view key, T value, const Range& range) {
  if (in_range(value, range)) return;
  if (range.message.empty()) {
    TS_FAIL("config: '{}' = {} is out of range; it must be in [{}, {}]", key, value, static_cast<int64_t>(range.low),
            static_cast<int64_t>(range.high));
  }
  TS_FAIL("config: {}", fmt::format(fmt::runtime(range.message), fmt::arg("key", key), fmt::arg("value", value)));
}

}  // namespace tessera::config
