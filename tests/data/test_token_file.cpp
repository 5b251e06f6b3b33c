// Token files: the llm.c layout byte for byte, both versions, and every kind of damage.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "data/token_file.h"
#include "test_util.h"

namespace tessera::data {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

int32_t header_int(const std::string& bytes, size_t i) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

TEST(TokenFile, WritesTheLlmcLayoutWithUint16Tokens) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {0, 1, 65535, 300, 7};
  write_token_file(dir / "a.bin", tokens, 65536);
  const std::string bytes = read_bytes(dir / "a.bin");
  ASSERT_EQ(bytes.size(), 1024u + 2 * tokens.size());
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 1);
  EXPECT_EQ(header_int(bytes, 2), 5);
  EXPECT_EQ(header_int(bytes, 3), 65536);
  for (size_t i = 4; i < 256; ++i) EXPECT_EQ(header_int(bytes, i), 0) << i;
  uint16_t third;
  std::memcpy(&third, bytes.data() + 1024 + 4, 2);
  EXPECT_EQ(third, 65535);

  const auto file = TokenFile::open(dir / "a.bin", 65536);
  EXPECT_EQ(file->size(), 5);
  EXPECT_EQ(file->version(), 1);
  std::vector<int32_t> back(tokens.size());
  file->read(0, back);
  EXPECT_EQ(back, tokens);
  EXPECT_EQ(file->at(2), 65535);
}

TEST(TokenFile, LargeVocabulariesUseVersion2WithUint32Tokens) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = random_tokens(1000, 128256, 1);  // a Llama 3-sized vocabulary
  write_token_file(dir / "b.bin", tokens, 128256);
  EXPECT_EQ(read_bytes(dir / "b.bin").size(), 1024u + 4 * tokens.size());
  const auto file = TokenFile::open(dir / "b.bin", 128256);
  EXPECT_EQ(file->version(), 2);
  EXPECT_EQ(file->token_bytes(), 4);
  std::vector<int32_t> back(500);
  file->read(250, back);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), tokens.begin() + 250));
  EXPECT_EQ(token_file_version_for_vocab(65536), 1);
  EXPECT_EQ(token_file_version_for_vocab(65537), 2);
}

TEST(TokenFile, ReadsAFileWithoutARecordedVocabularyLikeLlmcWrites) {
  ScratchDir dir;
  std::string bytes(1024 + 3 * 2, '\0');
  const int32_t header[3] = {20240520, 1, 3};
  std::memcpy(bytes.data(), header, sizeof header);
  const uint16_t tokens[3] = {50256, 15496, 11};
  std::memcpy(bytes.data() + 1024, tokens, sizeof tokens);
  write_bytes(dir / "gpt2.bin", bytes);
  const auto file = TokenFile::open(dir / "gpt2.bin", 50257);
  EXPECT_EQ(file->recorded_vocab_size(), 0);
  EXPECT_EQ(file->at(0), 50256);
  EXPECT_EQ(file->at(2), 11);
}

TEST(TokenFile, WriterRejectsTokensOutsideTheVocabulary) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {1, 2, 500};
  EXPECT_ERROR_WITH(write_token_file(dir / "c.bin", tokens, 500), "token 500", "position 2");
  const std::vector<int32_t> negative = {-3};
  EXPECT_ERROR_WITH(write_token_file(dir / "c.bin", negative, 500), "token -3");
  EXPECT_FALSE(std::filesystem::exists(dir / "c.bin"));
}

class DamagedTokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    write_token_file(dir_ / "good.bin", random_tokens(100, 1000, 2), 1000);
    good_ = read_bytes(dir_ / "good.bin");
  }
  std::filesystem::path damaged(const std::string& bytes) {
    write_bytes(dir_ / "bad.bin", bytes);
    return dir_ / "bad.bin";
  }
  std::string with_header(size_t index, int32_t value) const {
    std::string b = good_;
    std::memcpy(b.data() + 4 * index, &value, 4);
    return b;
  }
  ScratchDir dir_;
  std::string good_;
};

TEST_F(DamagedTokenFile, BadMagic) {
  EXPECT_ERROR_WITH(TokenFile::open(damaged(with_header(0, 12345))), "bad.bin", "bad magic 12345", "20240520");
}

TEST_F(DamagedTokenFile, WrongVersion) {
  EXPECT_ERROR_WITH(TokenFile::open(damaged(with_header(1, 3))), "bad.bin", "unsupported version 3");
  EXPECT_ERROR_WITH(TokenFile::open(damaged(with_header(1, 0))), "unsupported version 0");
}

TEST_F(DamagedTokenFile, TruncatedBody) {
  EXPECT_ERROR_WITH(TokenFile::open(damaged(good_.substr(0, good_.size() - 1))), "bad.bin", "truncated",
                    "100 tokens");
  EXPECT_ERROR_WITH(TokenFile::open(damaged(good_.substr(0, 1024))), "truncated");
}

TEST_F(DamagedTokenFile, TruncatedHeaderAndEmptyFile) {
  EXPECT_ERROR_WITH(TokenFile::open(damaged(good_.substr(0, 1000))), "truncated", "1000 bytes");
  EXPECT_ERROR_WITH(TokenFile::open(damaged("")), "truncated", "0 bytes");
}

TEST_F(DamagedTokenFile, CountLargerThanTheFileOrTrailingBytes) {
  // A huge count must be caught by the size check, not become a huge allocation.
  EXPECT_ERROR_WITH(TokenFile::open(damaged(with_header(2, 2'000'000'000))), "truncated", "2000000000 tokens");
  EXPECT_ERROR_WITH(TokenFile::open(damaged(with_header(2, -5))), "negative token count");
  EXPECT_ERROR_WITH(TokenFile::open(damaged(good_ + "xy")), "longer than its header");
}

TEST_F(DamagedTokenFile, TokensOutOfRangeForTheVocabulary) {
  std::string b = good_;
  const uint16_t big = 1200;
  std::memcpy(b.data() + 1024 + 2 * 42, &big, 2);
  const auto path = damaged(b);
  EXPECT_NO_THROW(TokenFile::open(path));  // without a vocabulary nothing to check against
  EXPECT_ERROR_WITH(TokenFile::open(path, 1000), "token 1200", "position 42", "[0, 1000)");
  // The header's recorded vocabulary is larger than the model's.
  EXPECT_ERROR_WITH(TokenFile::open(dir_ / "good.bin", 999), "vocabulary of 1000", "has 999");
}

TEST_F(DamagedTokenFile, MissingFile) {
  EXPECT_ERROR_WITH(TokenFile::open(dir_ / "absent.bin"), "absent.bin", "tessera data prepare");
}

TEST_F(DamagedTokenFile, BytesInMemoryGetTheSameChecksAsAFile) {
  const auto file = TokenFile::from_bytes(good_, "memory.bin", 1000);
  const auto mapped = TokenFile::open(dir_ / "good.bin");
  ASSERT_EQ(file->size(), 100);
  std::vector<int32_t> a(100), b(100);
  file->read(0, a);
  mapped->read(0, b);
  EXPECT_EQ(a, b);
  EXPECT_ERROR_WITH(TokenFile::from_bytes(with_header(1, 3), "memory.bin"), "memory.bin", "unsupported version 3");
  EXPECT_ERROR_WITH(TokenFile::from_bytes(good_.substr(0, 10), "memory.bin"), "truncated", "10 bytes");
  EXPECT_ERROR_WITH(TokenFile::from_bytes(good_, "memory.bin", 999), "vocabulary of 1000");
}

TEST_F(DamagedTokenFile, AFolderIsNotATokenFile) {
  EXPECT_ERROR_WITH(TokenFile::open(dir_.path()), "not a regular file");
}

TEST(TokenFile, ReadOutsideTheFileIsAnError) {
  ScratchDir dir;
  write_token_file(dir / "d.bin", random_tokens(10, 50, 3), 50);
  const auto file = TokenFile::open(dir / "d.bin");
  std::vector<int32_t> out(5);
  EXPECT_ERROR_WITH(file->read(8, out), "[8, 13)", "10 tokens");
  EXPECT_ERROR_WITH(file->at(-1), "outside");
}

}  // namespace
}  // namespace tessera::data
