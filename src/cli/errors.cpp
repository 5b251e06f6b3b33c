#include "cli/errors.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <ios>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <typeinfo>

#include "core/check.h"

namespace tessera::cli {

namespace {

std::string type_name(const std::exception& e) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(typeid(e).name());
}

// libstdc++ says "filesystem error: cannot create directories: Not a directory [a/b]"; the user
// needs the operation, the path and the reason, without the prefix and the brackets.
std::string describe_filesystem(const std::filesystem::filesystem_error& e) {
  std::string operation = e.what();
  constexpr std::string_view prefix = "filesystem error: ";
  if (operation.starts_with(prefix)) operation.erase(0, prefix.size());
  if (const auto bracket = operation.find(" ["); bracket != std::string::npos) operation.resize(bracket);
  const std::string reason = e.code().message();
  if (operation.ends_with(": " + reason)) operation.resize(operation.size() - reason.size() - 2);
  std::string paths;
  if (!e.path1().empty()) paths += fmt::format(" '{}'", e.path1().string());
  if (!e.path2().empty()) paths += fmt::format(" and '{}'", e.path2().string());
  return fmt::format("{}{}: {}; check that the path names a folder or file you may write and that the disk has room",
                     operation, paths, reason);
}

// nlohmann prefixes its messages with an id ("[json.exception.type_error.302] ...").
std::string describe_json(const nlohmann::json::exception& e) {
  std::string message = e.what();
  if (message.starts_with("[json.exception.")) {
    if (const auto end = message.find("] "); end != std::string::npos) message.erase(0, end + 2);
  }
  return fmt::format("a JSON file tessera read is malformed: {}", message);
}

std::string describe_toml(const toml::parse_error& e) {
  const auto& where = e.source();
  const std::string file = where.path ? *where.path : std::string("a TOML text");
  return fmt::format("{} line {} column {}: {}", file, where.begin.line, where.begin.column, e.description());
}

std::string message_of(const std::exception& e) {
  if (const auto* t = dynamic_cast<const Error*>(&e)) return t->what();
  if (const auto* f = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) return describe_filesystem(*f);
  if (const auto* j = dynamic_cast<const nlohmann::json::exception*>(&e)) return describe_json(*j);
  if (const auto* t = dynamic_cast<const toml::parse_error*>(&e)) return describe_toml(*t);
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return "out of memory: the command needed more memory than this machine could give; for training, shrink "
           "the model or the microbatch (model.n_layer, model.n_embd, model.seq_len, train.micro_batch_size)";
  }
  if (const auto* io = dynamic_cast<const std::ios_base::failure*>(&e)) {
    return fmt::format("reading or writing a file failed: {}; check that each path given names a file (not a "
                       "folder) that exists and can be read",
                       io->what());
  }
  return e.what();
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char c) { out += fmt::format("\\x{:02X}", c); };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7F) || c == '\n' || c == '\t') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {  // a control byte: ESC would steer the terminal, CR overwrite the line
      escape(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlong forms, surrogates or code points past U+10FFFF)
    // is text; any other byte is shown as a number.
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    bool valid = length >= 2 && c >= 0xC2 && c <= 0xF4 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (valid && length >= 3) {
      const auto second = static_cast<unsigned char>(text[i + 1]);
      if (c == 0xE0 && second < 0xA0) valid = false;  // overlong
      if (c == 0xED && second >= 0xA0) valid = false;  // surrogate
      if (c == 0xF0 && second < 0x90) valid = false;  // overlong
      if (c == 0xF4 && second >= 0x90) valid = false;  // past U+10FFFF
    }
    if (!valid) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string describe_error(const std::exception& e, bool debug) {
  std::string line = "error: " + printable(message_of(e));
  if (!debug) return line;
  const auto* t = dynamic_cast<const Error*>(&e);
  if (t != nullptr && !t->where().empty()) return line + "\n  at " + t->where();
  if (t == nullptr) return line + "\n  (" + type_name(e) + ")";
  return line;
}

std::string describe_unknown_error() { return "error: the command failed with an exception that carries no message"; }

}  // namespace tessera::cli
