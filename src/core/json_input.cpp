#include "core/json_input.h"

#include "core/check.h"

namespace tessera {

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what) {
  const auto bounded = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    TS_CHECK(depth <= kMaxJsonDepth,
             "{} nests JSON more than {} levels deep, far beyond anything tessera writes: it is corrupt or not what "
             "it claims to be",
             what, kMaxJsonDepth);
    return true;
  };
  return nlohmann::json::parse(text.begin(), text.end(), bounded);
}

}  // namespace tessera
