// The SentencePiece tokenizer: exact round trips, agreement with SentencePiece's own whole-text
// encoding, determinism, files, and bad input.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <memory>
#include <random>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace tessera::data {
namespace {

using testing::make_text;
using testing::ScratchDir;
using testing::write_bytes;

Corpus small_corpus(size_t lines = 3000) {
  Corpus c;
  c.source = "test corpus";
  c.documents.push_back({"a", make_text(lines)});
  return c;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TokenizerTrainOptions options;
    options.vocab_size = 400;
    options.threads = 2;
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::train(small_corpus(), options));
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  static std::unique_ptr<Tokenizer> tokenizer_;
};
std::unique_ptr<Tokenizer> TokenizerTest::tokenizer_;

// Random valid UTF-8: ASCII (controls included), Latin, CJK, emoji and other planes; no
// surrogates (not characters) and no U+2581 (SentencePiece's space marker, tested apart).
std::string random_utf8(std::mt19937& rng, size_t chars) {
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    uint32_t cp = 0;
    switch (rng() % 5) {
      case 0: cp = rng() % 0x80; break;
      case 1: cp = 0x20 + rng() % 0x5F; break;
      case 2: cp = 0x80 + rng() % 0x780; break;
      case 3: cp = 0x800 + rng() % 0xF800; break;
      default: cp = 0x10000 + rng() % 0x100000; break;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581) cp = 'x';
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

TEST_F(TokenizerTest, TrainsToTheRequestedVocabularyWithSpecialIds) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 400);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.splits_at_newlines());
  // Training learned merges: common words are single pieces, so text is shorter in tokens than
  // in bytes.
  const std::string text = make_text(50, 99);
  EXPECT_LT(t.encode(text).size() * 2, text.size());
}

TEST_F(TokenizerTest, RoundTripsWhitespaceControlsAndAnyScript) {
  const Tokenizer& t = *tokenizer_;
  static constexpr char kControls[] = "nul\0byte and \x01\x1f controls";
  const std::string cases[] = {
      "",
      "the light",
      "  leading and trailing spaces  ",
      "runs    of     spaces\tand\t\ttabs\n\n\nand blank lines\n",
      "\n",
      "windows\r\nline ends\r\n",
      std::string(kControls, sizeof kControls - 1),
      "caf\xC3\xA9, na\xC3\xAFve, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E, \xF0\x9F\x98\x80 emoji",
      " \t \n \t ",
  };
  for (const std::string& text : cases) {
    EXPECT_EQ(t.decode(t.encode(text)), text) << "text: " << text;
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_utf8(rng, 1 + rng() % 80);
    ASSERT_EQ(t.decode(t.encode(text)), text) << "random text " << i;
  }
}

// Line-by-line encoding is the fast path; it must give exactly SentencePiece's ids for the text
// as a whole.
TEST_F(TokenizerTest, LineByLineEncodingEqualsSentencePieceOnTheWholeText) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(tokenizer_->serialized()).ok());
  std::mt19937 rng(5);
  std::string text = make_text(200, 3) + "\n\n  indented\n\ttabbed\n" + random_utf8(rng, 300) + "\nend";
  std::vector<int> expected;
  ASSERT_TRUE(sp.Encode(text, &expected).ok());
  const std::vector<int32_t> got = tokenizer_->encode(text);
  EXPECT_EQ(std::vector<int32_t>(expected.begin(), expected.end()), got);
}

TEST_F(TokenizerTest, DocumentedExceptionsSpaceMarkerAndInvalidUtf8) {
  const Tokenizer& t = *tokenizer_;
  // U+2581 is SentencePiece's whitespace marker: it comes back as a space.
  EXPECT_EQ(t.decode(t.encode("a\xE2\x96\x81" "b")), "a b");
  // A byte that starts no valid character becomes U+FFFD, one per bad byte.
  EXPECT_EQ(t.decode(t.encode("ok\xFF\xFE")), "ok\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_F(TokenizerTest, SaveLoadGivesTheSameIds) {
  ScratchDir dir;
  tokenizer_->save(dir / "t.model");
  const Tokenizer loaded = Tokenizer::load(dir / "t.model");
  EXPECT_EQ(loaded.serialized(), tokenizer_->serialized());
  const std::string text = make_text(20, 11);
  EXPECT_EQ(loaded.encode(text), tokenizer_->encode(text));
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  const std::vector<int32_t> ids = {5, 400};
  EXPECT_ERROR_WITH(tokenizer_->decode(ids), "token id 400", "position 1");
  const std::vector<int32_t> negative = {-1};
  EXPECT_ERROR_WITH(tokenizer_->decode(negative), "token id -1");
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TokenizerTrainOptions options;
  options.vocab_size = 300;
  options.threads = 2;
  const Tokenizer a = Tokenizer::train(small_corpus(800), options);
  const Tokenizer b = Tokenizer::train(small_corpus(800), options);
  EXPECT_EQ(a.serialized(), b.serialized());
  EXPECT_EQ(a.vocab_size(), 300);
}

// SentencePiece's own words (its flags, its source lines) never reach the user: the conditions a
// tessera option fixes are said with that option and a value that works.
TEST(Tokenizer, SentencePieceFailuresAreSaidInTesseraTerms) {
  // 600 distinct characters: each needs a piece, beside the 259 byte and special ids.
  Corpus wide;
  wide.source = "wide corpus";
  std::string text;
  for (int line = 0; line < 60; ++line) {
    for (int i = 0; i < 40; ++i) {
      const char32_t cp = 0x4E00 + static_cast<char32_t>((line * 41 + i * 7) % 600);
      text += static_cast<char>(0xE0 | (cp >> 12));
      text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      text += static_cast<char>(0x80 | (cp & 0x3F));
    }
    text += '\n';
  }
  wide.documents.push_back({"wide", text});
  TokenizerTrainOptions options;
  options.vocab_size = 400;
  try {
    Tokenizer::train(wide, options);
    FAIL() << "a vocabulary smaller than the characters of the corpus was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--vocab-size 400 is too small for wide corpus"), std::string::npos) << m;
    EXPECT_EQ(m.find("character_coverage"), std::string::npos) << m;
    EXPECT_EQ(m.find(".cc("), std::string::npos) << m;
    // The size it names works.
    const auto at = m.find("use --vocab-size ");
    ASSERT_NE(at, std::string::npos) << m;
    options.vocab_size = std::stoll(m.substr(at + 17));
    EXPECT_NO_THROW(Tokenizer::train(wide, options));
  }
  // More threads than SentencePiece's trainer takes (128) are not its error to report.
  options.vocab_size = 300;
  options.threads = 200;
  EXPECT_NO_THROW(Tokenizer::train(small_corpus(200), options));
  options.threads = -1;
  EXPECT_ERROR_WITH(Tokenizer::train(small_corpus(200), options), "--threads must be 0");
}

TEST(Tokenizer, VocabularySizesTheCorpusCannotSupportAreClearErrors) {
  TokenizerTrainOptions options;
  options.vocab_size = 100;
  EXPECT_ERROR_WITH(Tokenizer::train(small_corpus(200), options), "--vocab-size 100", "at least 260");
  options.vocab_size = 60000;  // far more pieces than a 32-word corpus has
  EXPECT_ERROR_WITH(Tokenizer::train(small_corpus(200), options), "--vocab-size 60000 is too large for test corpus",
                    "or less");
  Corpus empty;
  empty.source = "nothing";
  options.vocab_size = 300;
  EXPECT_ERROR_WITH(Tokenizer::train(empty, options), "corpus nothing is empty");
}

TEST(Tokenizer, CorruptMissingOrEmptyFilesAreClearErrors) {
  ScratchDir dir;
  TokenizerTrainOptions options;
  options.vocab_size = 300;
  const Tokenizer good = Tokenizer::train(small_corpus(500), options);
  const std::string bytes = good.serialized();

  EXPECT_ERROR_WITH(Tokenizer::load(dir / "missing.model"), "missing.model", "does not exist");
  write_bytes(dir / "empty.model", "");
  EXPECT_ERROR_WITH(Tokenizer::load(dir / "empty.model"), "empty.model", "is empty");
  write_bytes(dir / "half.model", std::string_view(bytes).substr(0, bytes.size() / 2));
  EXPECT_ERROR_WITH(Tokenizer::load(dir / "half.model"), "half.model", "corrupt");
  std::string garbage(4000, '\0');
  std::mt19937 rng(3);
  for (char& c : garbage) c = static_cast<char>(rng());
  write_bytes(dir / "garbage.model", garbage);
  EXPECT_ERROR_WITH(Tokenizer::load(dir / "garbage.model"), "garbage.model", "corrupt");
  write_bytes(dir / "text.model", "this is not a model\n");
  EXPECT_ERROR_WITH(Tokenizer::load(dir / "text.model"), "text.model", "corrupt");
}

// A model made elsewhere (here with Llama's settings: a dummy "▁" prefix before the text) must
// still encode exactly as SentencePiece does: the line-by-line shortcut must see it does not apply.
TEST(Tokenizer, LlamaStyleModelWithDummyPrefixEncodesLikeSentencePiece) {
  struct Lines : sentencepiece::SentenceIterator {
    std::vector<std::string> lines;
    size_t i = 0;
    bool done() const override { return i >= lines.size(); }
    void Next() override { ++i; }
    const std::string& value() const override { return lines[i]; }
    sentencepiece::util::Status status() const override { return {}; }
  } lines;
  const std::string text = make_text(500, 21);
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\n', begin);
    lines.lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  std::string model;
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train(
                  {{"model_type", "bpe"}, {"vocab_size", "400"}, {"byte_fallback", "true"}, {"minloglevel", "2"},
                   {"normalization_rule_name", "identity"}, {"remove_extra_whitespaces", "false"},
                   {"add_dummy_prefix", "true"}, {"model_prefix", ""}, {"num_threads", "2"}},
                  &lines, &model)
                  .ok());
  const Tokenizer t = Tokenizer::from_bytes(model, "foreign.model");
  EXPECT_FALSE(t.splits_at_newlines());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(model).ok());
  const std::string sample = "the light\nwas good\n";
  std::vector<int> expected;
  ASSERT_TRUE(sp.Encode(sample, &expected).ok());
  EXPECT_EQ(t.encode(sample), std::vector<int32_t>(expected.begin(), expected.end()));
  EXPECT_EQ(t.decode(t.encode(sample)), sample);
}

// The corpus is encoded in parallel chunks cut at newlines; the ids equal a single encode of each
// document, with EOS after each.
TEST_F(TokenizerTest, ParallelCorpusEncodingEqualsSerialEncoding) {
  Corpus corpus;
  corpus.source = "two documents";
  corpus.documents.push_back({"big", make_text(12000, 4)});  // > 256 KiB: several chunks
  corpus.documents.push_back({"empty", ""});
  corpus.documents.push_back({"small", "last words"});
  ASSERT_GT(corpus.documents[0].text.size(), size_t{1} << 19);
  std::vector<int32_t> expected = tokenizer_->encode(corpus.documents[0].text);
  expected.push_back(tokenizer_->eos_id());
  const std::vector<int32_t> tail = tokenizer_->encode("last words");
  expected.insert(expected.end(), tail.begin(), tail.end());
  expected.push_back(tokenizer_->eos_id());
  EXPECT_EQ(encode_corpus(*tokenizer_, corpus, 2), expected);
  EXPECT_EQ(encode_corpus(*tokenizer_, corpus, 1), expected);
}

}  // namespace
}  // namespace tessera::data
