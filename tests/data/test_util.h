#pragma once
// Shared by the data tests: scratch folders, small files, and expecting an error whose
// message names the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>

#include "core/check.h"

namespace tessera::data::testing {

// A fresh folder under the system temp dir, removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("tessera_data_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// English-like text from a small word list, deterministic in `seed`: enough words and lines for
// a tokenizer of a few hundred pieces.
inline std::string make_text(size_t lines, uint32_t seed = 7) {
  static const char* words[] = {"the",    "of",    "and",   "light",  "water", "earth", "day",    "night",
                                "said",   "God",   "was",   "upon",   "face",  "deep",  "heaven", "created",
                                "moved",  "good",  "called", "evening", "morning", "first", "divided", "form",
                                "void",   "spirit", "there", "let",   "be",    "saw",   "from",   "darkness"};
  std::mt19937 rng(seed);
  std::string text;
  for (size_t l = 0; l < lines; ++l) {
    const size_t n = 4 + rng() % 12;
    for (size_t w = 0; w < n; ++w) {
      if (w > 0) text += ' ';
      text += words[rng() % (sizeof words / sizeof words[0])];
      if (rng() % 9 == 0) text += ',';
    }
    text += ".\n";
  }
  return text;
}

}  // namespace tessera::data::testing

// Expects `stmt` to throw tessera::Error whose message contains every one of the given parts.
#define EXPECT_ERROR_WITH(stmt, ...)                                                        \
  do {                                                                                      \
    bool thrown_ = false;                                                                   \
    try {                                                                                   \
      stmt;                                                                                 \
    } catch (const ::tessera::Error& e_) {                                                  \
      thrown_ = true;                                                                       \
      const std::string what_ = e_.what();                                                  \
      for (const char* part_ : {__VA_ARGS__}) {                                             \
        EXPECT_NE(what_.find(part_), std::string::npos) << "message lacks '" << part_ << "': " << what_; \
      }                                                                                     \
    }                                                                                       \
    EXPECT_TRUE(thrown_) << #stmt " did not throw tessera::Error";                          \
  } while (0)
