#include "config/toml_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>

namespace tessera::config {

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

// "99999999999999999999": digits that TOML could not hold in 64 bits, so the command-line override
// kept them as a string (run_config.cpp). They were meant as a number that is too large.
bool is_integer_literal(std::string_view s) {
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '_'; });
}

// The value of a decimal number literal ("1e999" gives inf), or nullopt for other text.
std::optional<double> number_literal(const std::string& text) {
  std::string plain;
  std::copy_if(text.begin(), text.end(), std::back_inserter(plain), [](char c) { return c != '_'; });
  if (plain.empty() || !(std::isdigit(static_cast<unsigned char>(plain.back())) || plain.back() == '.')) {
    return std::nullopt;
  }
  if (plain.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;  // no "nan", hex, ...
  char* end = nullptr;
  const double v = std::strtod(plain.c_str(), &end);
  if (end != plain.c_str() + plain.size()) return std::nullopt;
  return v;
}

template <class T>
[[noreturn]] void integer_out_of_range(const std::string& key, const std::string& value) {
  TS_FAIL("config: '{}' = {} is out of range; it must be in [{}, {}]", key, value, std::numeric_limits<T>::min(),
          std::numeric_limits<T>::max());
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A suggestion more than a third of the word away is noise, not help.
  return best_distance <= std::max<size_t>(2, word.size() / 3) ? best : std::string();
}

const toml::table& TableReader::empty_table() {
  static const toml::table empty;
  return empty;
}

TableReader::TableReader(const toml::table& table, std::string path) : table_(&table), path_(std::move(path)) {}

TableReader TableReader::table(const std::string& key) {
  known_.push_back(key);
  const toml::node* node = table_->get(key);
  if (node == nullptr) return TableReader(empty_table(), dotted(key));
  TS_CHECK(node->is_table(), "config: '{}' must be a table, got {}", dotted(key), type_name(node->type()));
  return TableReader(*node->as_table(), dotted(key));
}

std::vector<TableReader> TableReader::tables(const std::string& key) {
  known_.push_back(key);
  std::vector<TableReader> out;
  const toml::node* node = table_->get(key);
  if (node == nullptr) return out;
  TS_CHECK(node->is_array_of_tables(), "config: '{}' must be an array of tables ([[{}]] sections), got {}", dotted(key),
           dotted(key), type_name(node->type()));
  const toml::array& items = *node->as_array();
  for (size_t i = 0; i < items.size(); ++i) {
    out.emplace_back(*items.get(i)->as_table(), fmt::format("{}[{}]", dotted(key), i));
  }
  return out;
}

template <class T>
std::optional<T> TableReader::read(const std::string& key) {
  known_.push_back(key);
  const toml::node* node = table_->get(key);
  if (node == nullptr) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    TS_CHECK(node->is_boolean(), "config: '{}' must be true or false, got {}", dotted(key), type_name(node->type()));
    return node->as_boolean()->get();
  } else if constexpr (std::is_integral_v<T>) {
    if (node->is_string() && is_integer_literal(node->as_string()->get())) {
      integer_out_of_range<T>(dotted(key), node->as_string()->get());
    }
    TS_CHECK(node->is_integer(), "config: '{}' must be an integer, got {}", dotted(key), type_name(node->type()));
    int64_t v = node->as_integer()->get();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      integer_out_of_range<T>(dotted(key), std::to_string(v));
    }
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (node->is_string()) {
      // A number TOML could not hold ("1e999", or more digits than 64 bits), which the command-line
      // override kept as a string: out of range, not "a string".
      const std::optional<double> v = number_literal(node->as_string()->get());
      if (v.has_value()) {
        TS_CHECK(std::isfinite(*v) && std::abs(*v) <= static_cast<double>(std::numeric_limits<T>::max()),
                 "config: '{}' = {} is out of range; it must be a finite number in [{}, {}]", dotted(key),
                 node->as_string()->get(), std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max());
        return static_cast<T>(*v);
      }
    }
    TS_CHECK(node->is_number(), "config: '{}' must be a number, got {}", dotted(key), type_name(node->type()));
    const double v = node->is_integer() ? static_cast<double>(node->as_integer()->get())
                                        : node->as_floating_point()->get();
    // nan and inf are valid TOML, but no setting of tessera means them; caught here they name the
    // key instead of surfacing later inside a kernel.
    TS_CHECK(std::isfinite(v), "config: '{}' = {} must be a finite number", dotted(key), v);
    TS_CHECK(std::abs(v) <= static_cast<double>(std::numeric_limits<T>::max()),
             "config: '{}' = {} is out of range; it must be a finite number in [{}, {}]", dotted(key), v,
             std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max());
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    TS_CHECK(node->is_string(), "config: '{}' must be a string, got {}", dotted(key), type_name(node->type()));
    return node->as_string()->get();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    TS_CHECK(node->is_array(), "config: '{}' must be an array of integers, got {}", dotted(key), type_name(node->type()));
    std::vector<int64_t> out;
    for (const auto& item : *node->as_array()) {
      TS_CHECK(item.is_integer(), "config: '{}' must hold only integers", dotted(key));
      out.push_back(item.as_integer()->get());
    }
    return out;
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    TS_CHECK(node->is_array(), "config: '{}' must be an array of numbers, got {}", dotted(key), type_name(node->type()));
    std::vector<double> out;
    for (const auto& item : *node->as_array()) {
      TS_CHECK(item.is_number(), "config: '{}' must hold only numbers", dotted(key));
      const double v = item.is_integer() ? static_cast<double>(item.as_integer()->get()) : item.as_floating_point()->get();
      TS_CHECK(std::isfinite(v), "config: '{}' holds {}; its numbers must be finite", dotted(key), v);
      out.push_back(v);
    }
    return out;
  } else {
    static_assert(sizeof(T) == 0, "unsupported config value type");
  }
}

template std::optional<bool> TableReader::read<bool>(const std::string&);
template std::optional<int> TableReader::read<int>(const std::string&);
template std::optional<int64_t> TableReader::read<int64_t>(const std::string&);
template std::optional<double> TableReader::read<double>(const std::string&);
template std::optional<float> TableReader::read<float>(const std::string&);
template std::optional<std::string> TableReader::read<std::string>(const std::string&);
template std::optional<std::vector<int64_t>> TableReader::read<std::vector<int64_t>>(const std::string&);
template std::optional<std::vector<double>> TableReader::read<std::vector<double>>(const std::string&);

void TableReader::finish() const {
  for (const auto& [key, node] : *table_) {
    std::string k(key.str());
    if (std::find(known_.begin(), known_.end(), k) != known_.end()) continue;
    std::string hint = closest_match(k, known_);
    if (!hint.empty()) {
      TS_FAIL("config: unknown key '{}'; did you mean '{}'?", dotted(k), dotted(hint));
    }
    // A reader may have asked for a key twice; each is named once, in the order first asked.
    std::vector<std::string> names;
    for (const auto& c : known_) {
      if (std::find(names.begin(), names.end(), c) == names.end()) names.push_back(c);
    }
    std::string all;
    for (const auto& c : names) all += (all.empty() ? "" : ", ") + c;
    if (path_.empty() && node.is_table()) TS_FAIL("config: unknown section [{}]; the sections are: {}", k, all);
    if (path_.empty()) {
      TS_FAIL("config: key '{}' stands outside any section; every key belongs to one of: {}", k, all);
    }
    TS_FAIL("config: unknown key '{}'; known keys of [{}] are: {}", dotted(k), path_, all);
  }
}

}  // namespace tessera::config
