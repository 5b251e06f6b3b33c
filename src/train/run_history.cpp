#include "train/run_history.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {
// The step of a metrics line, or -1 when it has none.
int64_t step_of(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return -1;
  return j["step"].get<int64_t>();
}
}  // namespace

RunHistory reload_history(const std::string& path, int64_t upto) {
  RunHistory h;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const int64_t step = step_of(j);
    if (step < 0 || step > upto || !j.contains("loss") || !j["loss"].is_number()) continue;
    const std::string kind = j.value("kind", "");
    if (kind == "train") {
      h.train.x.push_back(static_cast<double>(step));
      h.train.y.push_back(j["loss"].get<double>());
      if (j.contains("elapsed_seconds") && j["elapsed_seconds"].is_number()) {
        h.elapsed_seconds = j["elapsed_seconds"].get<double>();
      }
    } else if (kind == "val") {
      h.val.x.push_back(static_cast<double>(step));
      h.val.y.push_back(j["loss"].get<double>());
    }
  }
  return h;
}

void truncate_history(const std::string& path, int64_t upto) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (step_of(nlohmann::json::parse(line, nullptr, false)) > upto) continue;
    kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

double unigram_entropy(const data::TokenFile& file, int64_t vocab) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  std::vector<int32_t> chunk(1 << 16);
  for (int64_t begin = 0; begin < file.size(); begin += static_cast<int64_t>(chunk.size())) {
    const auto n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(chunk.size()), file.size() - begin));
    file.read(begin, std::span<int32_t>(chunk.data(), n));
    for (size_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(chunk[i])];
  }
  double h = 0;
  const auto total = static_cast<double>(file.size());
  for (int64_t c : counts) {
    if (c > 0) h -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / total);
  }
  return h;
}

}  // namespace tessera::train
