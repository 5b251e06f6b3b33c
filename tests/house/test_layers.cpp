// The house has no arrow running up: every `#include "…"` of a file under src/ names a file of its
// own folder or of a folder below it in the layer list of docs/architecture.md. The list is read
// from the doc, so the drawing and the code cannot drift apart without this test failing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path source_dir() {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  if (source == nullptr) throw std::runtime_error("TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)");
  return source;
}

// The folders of src/ from the bottom up, as the fenced ```layers block of the doc lists them.
std::vector<std::string> read_layers(const fs::path& doc) {
  std::ifstream in(doc);
  std::vector<std::string> layers;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line == "```layers") {
      inside = true;
    } else if (inside && line.starts_with("```")) {
      break;
    } else if (inside && !line.empty()) {
      layers.push_back(line);
    }
  }
  return layers;
}

// The index of the layer a path under src/ belongs to: the longest listed folder that holds it
// (memory/remat is a layer of its own above memory); -1 where none does.
int layer_of(const std::vector<std::string>& layers, const std::string& path) {
  int best = -1;
  size_t best_length = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string folder = layers[i] + "/";
    if (path.starts_with(folder) && folder.size() > best_length) {
      best = static_cast<int>(i);
      best_length = folder.size();
    }
  }
  return best;
}

struct Include {
  std::string file;    // under src/
  int line = 0;
  std::string target;  // as written, rooted at src/
};

std::vector<Include> quoted_includes(const fs::path& src) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<Include> includes;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(src)) {
    const std::string extension = entry.path().extension().string();
    if (!entry.is_regular_file() || (extension != ".h" && extension != ".cpp")) continue;
    std::ifstream in(entry.path());
    std::string text;
    int number = 0;
    while (std::getline(in, text)) {
      ++number;
      std::smatch match;
      if (std::regex_search(text, match, include_line))
        includes.push_back({fs::relative(entry.path(), src).generic_string(), number, match[1].str()});
    }
  }
  return includes;
}

std::vector<std::string> source_files(const fs::path& src) {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(src)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && (extension == ".h" || extension == ".cpp"))
      files.push_back(fs::relative(entry.path(), src).generic_string());
  }
  return files;
}

TEST(HouseLayers, DocListsEveryFolderOnce) {
  const std::vector<std::string> layers = read_layers(source_dir() / "docs" / "architecture.md");
  ASSERT_GE(layers.size(), 10u) << "docs/architecture.md lost its ```layers block";
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_TRUE(fs::is_directory(source_dir() / "src" / layers[i])) << "layer '" << layers[i] << "' is no folder of src/";
    for (size_t j = 0; j < i; ++j) EXPECT_NE(layers[i], layers[j]) << "layer listed twice";
  }
  for (const std::string& file : source_files(source_dir() / "src"))
    EXPECT_GE(layer_of(layers, file), 0) << "src/" << file << " is in no layer of docs/architecture.md: add its folder";
}

TEST(HouseLayers, NoIncludeRunsUp) {
  const fs::path src = source_dir() / "src";
  const std::vector<std::string> layers = read_layers(source_dir() / "docs" / "architecture.md");
  ASSERT_FALSE(layers.empty());
  const std::vector<Include> includes = quoted_includes(src);
  ASSERT_GT(includes.size(), 100u);
  for (const Include& include : includes) {
    const int from = layer_of(layers, include.file);
    const int to = layer_of(layers, include.target);
    if (from < 0) continue;  // reported by DocListsEveryFolderOnce
    EXPECT_TRUE(fs::is_regular_file(src / include.target))
        << "src/" << include.file << ":" << include.line << " includes \"" << include.target
        << "\", which is no file under src/ (includes are rooted at src/)";
    EXPECT_LE(to, from) << "src/" << include.file << ":" << include.line << " (layer " << layers[from]
                        << ") includes \"" << include.target << "\" from the higher layer "
                        << (to >= 0 ? layers[to] : std::string("?"));
  }
}

}  // namespace
