#pragma once
// Token files in the llm.c format (also read by nanoGPT-style loaders that skip the header):
//
//   int32 header[256]   [0] magic 20240520
//                       [1] version: 1 = uint16 tokens, 2 = uint32 tokens (vocabularies > 65536)
//                       [2] number of tokens (so at most 2^31 - 1 tokens per file)
//                       [3] vocabulary size the tokens were made with (0 = not recorded; llm.c
//                           writes 0 and ignores this field)
//                       [4..255] zero
//   tokens              count × 2 or 4 bytes
//
// All little-endian. Files are memory-mapped for reading: a corpus of any size costs no copy.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace tessera::data {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int64_t kTokenFileHeaderBytes = 256 * 4;

// 1 (uint16 tokens) when every id of the vocabulary fits in 16 bits, else 2 (uint32 tokens).
int token_file_version_for_vocab(int64_t vocab_size);

// Writes `tokens` (each in [0, vocab_size)) atomically: a temporary file, then a rename.
void write_token_file(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab_size);

class TokenFile {
 public:
  // Maps the file and checks the header: magic, version, and that the size is exactly the header
  // plus count × token bytes. When vocab_size > 0 it also checks that every token is below it
  // (one pass over the file) and that a recorded vocabulary size is not larger.
  static std::shared_ptr<const TokenFile> open(const std::filesystem::path& path, int64_t vocab_size = 0);
  // The same checks on a file's bytes in memory, which the TokenFile keeps; `name` stands for the
  // file in messages.
  static std::shared_ptr<const TokenFile> from_bytes(std::string bytes, const std::string& name,
                                                     int64_t vocab_size = 0);

  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int64_t size() const { return count_; }  // tokens
  int version() const { return version_; }
  int64_t token_bytes() const { return version_ == 1 ? 2 : 4; }
  int64_t recorded_vocab_size() const { return recorded_vocab_; }  // header[3]; 0 when unknown
  const std::filesystem::path& path() const { return path_; }

  int32_t at(int64_t index) const;
  // Copies tokens [begin, begin + out.size()) into `out`, widened to int32.
  void read(int64_t begin, std::span<int32_t> out) const;

 private:
  TokenFile() = default;
  // Checks the header against the size and sets the fields; with vocab_size > 0, every token.
  void check(const unsigned char* data, size_t bytes, int64_t vocab_size);

  std::filesystem::path path_;
  void* map_ = nullptr;  // the mapped file (open), or null
  size_t map_bytes_ = 0;
  std::string owned_;    // the bytes (from_bytes)
  const unsigned char* body_ = nullptr;
  int64_t count_ = 0;
  int version_ = 0;
  int64_t recorded_vocab_ = 0;
};

}  // namespace tessera::data
