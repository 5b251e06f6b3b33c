#pragma once
// Strict reading of TOML tables: every key that is read is remembered, and finish() rejects the
// ones nobody asked for with a "did you mean" hint. Wrong types and out-of-range values name the
// full dotted key: an integer too large for its type is "out of range" with the type's limits
// (also one too large for TOML's 64 bits, which a command-line override keeps as a string), and a
// floating-point key refuses nan and inf. Sections of the one config (model, data, train, ...) are
// read through this.
#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::config {

// Closest candidate by edit distance, or empty when nothing is close enough to suggest.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

class TableReader {
 public:
  // `path` is the dotted prefix used in messages, e.g. "model".
  TableReader(const toml::table& table, std::string path);

  template <class T>
  T get(const std::string& key, T fallback) {
    std::optional<T> v = read<T>(key);
    return v ? *v : fallback;
  }
  template <class T>
  T require(const std::string& key) {
    std::optional<T> v = read<T>(key);
    TS_CHECK(v.has_value(), "config: missing required key '{}'", dotted(key));
    return *v;
  }
  // A sub-table, read with the same strictness; empty when absent.
  TableReader table(const std::string& key);
  // An array of tables ([[key]] in TOML), each read with the same strictness; empty when absent.
  std::vector<TableReader> tables(const std::string& key);
  bool has(const std::string& key) const { return table_->contains(key); }
  // Whether `key` holds a string (for keys that take a word or a number).
  bool holds_string(const std::string& key) const {
    const toml::node* node = table_->get(key);
    return node != nullptr && node->is_string();
  }

  // Rejects every key that was never read. Call after reading all expected keys.
  void finish() const;
  std::string dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  template <class T>
  std::optional<T> read(const std::string& key);

  const toml::table* table_;
  std::string path_;
  std::vector<std::string> known_;
  static const toml::table& empty_table();
};

// Range check with a message naming the key: check_range("model.n_layer", v, 1, 4096).
template <class T>
void check_range(const std::string& key, T value, T lo, T hi) {
  TS_CHECK(value >= lo && value <= hi, "config: '{}' = {} is out of range; it must be in [{}, {}]", key, value, lo, hi);
}

}  // namespace tessera::config
