#pragma once
// JSON read from files tessera did not necessarily write (manifests, data.json, safetensors
// headers). No such file nests more than a few levels, while printing or hashing a value recurses
// once per level: a document nested 100 000 deep would overflow the stack the first time an error
// message shows it. So nesting is bounded while parsing, before anything recurses.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tessera {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; a syntax error throws nlohmann::json::parse_error as json::parse does (callers
// name the file in their own message), nesting deeper than kMaxJsonDepth throws tessera::Error
// naming `what` (the file).
nlohmann::json parse_json_bounded(std::string_view text, const std::string& what);

}  // namespace tessera
