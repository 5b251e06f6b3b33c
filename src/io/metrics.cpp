#include "io/metrics.h"

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace tessera::io {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  TS_CHECK(file_ != nullptr, "cannot open the metrics file '{}': {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  TS_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size(), "cannot write to the metrics file '{}': {}",
           path_, std::strerror(errno));
  std::fflush(file_);
}

}  // namespace tessera::io
