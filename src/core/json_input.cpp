#include "core/json_input.h"

#include "core/check.h"

namespace tessera {

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what) {
  // The depth is measured by a scan of the brackets outside strings, not by the parser's callback:
  // nlohmann's callback parser searches the enclosing object at the end of every value, which is
  // quadratic in an object's keys (a safetensors header of 240 000 tensors took many minutes).
  // Unbalanced or malformed text is left to the parser, which says where it breaks.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      TS_CHECK(++depth <= kMaxJsonDepth,
               "{} nests JSON more than {} levels deep, far beyond anything tessera writes: it is corrupt or not what "
               "it claims to be",
               what, kMaxJsonDepth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return nlohmann::json::parse(text.begin(), text.end());
}

}  // namespace tessera
