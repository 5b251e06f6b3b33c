#pragma once
// Metrics as JSON Lines: one object per event ({"kind": "train", "step": 10, "loss": ...}),
// appended and flushed as training goes, so a crash loses at most the line being written and the
// file can be followed with `tail -f` or loaded by any tool.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::io {

class MetricsLog {
 public:
  // append: keep earlier lines (a resumed run continues its log).
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tessera::io
