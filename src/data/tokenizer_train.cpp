// Training a SentencePiece BPE model on a corpus.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <regex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

namespace tessera::data {

namespace {

// SentencePiece skips training sentences longer than its max_sentence_length (4192 bytes by
// default); long lines (a paragraph per line, minified text) are cut into pieces below that size at
// a space, or else at a character boundary, so that their text still counts.
constexpr size_t kMaxTrainingLine = 4000;

// Feeds the corpus to the trainer line by line without copying it all.
class CorpusLines : public sentencepiece::SentenceIterator {
 public:
  explicit CorpusLines(const Corpus& corpus) : corpus_(corpus) { advance(); }

  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return current_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (doc_ < corpus_.documents.size()) {
      const std::string& text = corpus_.documents[doc_].text;
      if (pos_ >= text.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      size_t end = text.find('\n', pos_);
      if (end == std::string::npos) end = text.size();
      size_t stop = end;
      if (stop - pos_ > kMaxTrainingLine) {
        stop = pos_ + kMaxTrainingLine;
        const size_t space = text.rfind(' ', stop);
        if (space != std::string::npos && space > pos_) {
          stop = space;
        } else {
          while (stop > pos_ && (static_cast<unsigned char>(text[stop]) & 0xC0) == 0x80) --stop;
        }
      }
      current_.assign(text, pos_, stop - pos_);
      pos_ = stop == end ? end + 1 : stop;
      if (!current_.empty()) return;
    }
    done_ = true;
  }

  const Corpus& corpus_;
  size_t doc_ = 0;
  size_t pos_ = 0;
  std::string current_;
  bool done_ = false;
};

// Counts distinct code points (the text is valid UTF-8) to pick the character coverage.
size_t distinct_characters(const Corpus& corpus) {
  std::vector<bool> seen(0x110000, false);
  size_t count = 0;
  for (const Document& doc : corpus.documents) {
    const auto* s = reinterpret_cast<const unsigned char*>(doc.text.data());
    const size_t n = doc.text.size();
    for (size_t i = 0; i < n;) {
      uint32_t cp = s[i];
      size_t len = 1;
      if (cp >= 0xF0) {
        cp &= 0x07, len = 4;
      } else if (cp >= 0xE0) {
        cp &= 0x0F, len = 3;
      } else if (cp >= 0xC0) {
        cp &= 0x1F, len = 2;
      }
      for (size_t k = 1; k < len && i + k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
      i += len;
      if (cp < seen.size() && !seen[cp]) {
        seen[cp] = true;
        ++count;
      }
    }
  }
  return count;
}

// SentencePiece's trainer accepts at most this many threads (its trainer_interface.cc).
constexpr int kMaxTrainerThreads = 128;

// SentencePiece reports failures in its own terms: its flags (--character_coverage), its source
// lines and checks. The ones a tessera option can fix are said again in tessera's terms, naming
// the option and the value that works; anything else is wrapped so the user at least learns which
// step failed.
[[noreturn]] void fail_training(const std::string& why, const TokenizerTrainOptions& options, const Corpus& corpus) {
  std::smatch m;
  const std::regex too_high(R"(Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+))");
  if (std::regex_search(why, m, too_high)) {
    TS_FAIL("--vocab-size {} is too large for {}: its text yields at most {} pieces (bytes, special tokens, "
            "characters and merges); use --vocab-size {} or less, or a larger corpus",
            options.vocab_size, corpus.source, m[2].str(), m[2].str());
  }
  const std::regex too_small(R"(Vocabulary size is smaller than required_chars\. (\d+) vs (\d+))");
  if (std::regex_search(why, m, too_small)) {
    TS_FAIL("--vocab-size {} is too small for {}: the characters of its text each need a piece of their own, and "
            "with the 259 byte and special ids that makes {}; use --vocab-size {} or more",
            options.vocab_size, corpus.source, m[2].str(), m[2].str());
  }
  TS_FAIL("training the tokenizer (SentencePiece BPE, --vocab-size {}) on {} failed inside SentencePiece, which says: "
          "{}; try another --vocab-size, or bring a trained model with --tokenizer",
          options.vocab_size, corpus.source, why);
}

}  // namespace

Tokenizer Tokenizer::train(const Corpus& corpus, const TokenizerTrainOptions& options) {
  check_not_empty(corpus);
  // 256 byte pieces + <unk>, <s>, </s>: the smallest vocabulary byte fallback allows, before any
  // character or merge of the corpus.
  TS_CHECK(options.vocab_size >= 260 && options.vocab_size <= (int64_t{1} << 31) - 1,
           "--vocab-size {} is out of range: byte fallback needs 259 ids for bytes and special tokens, so choose "
           "at least 260 (e.g. 4096)", options.vocab_size);
  TS_CHECK(options.threads >= 0, "--threads must be 0 (every hardware thread) or more, got {}", options.threads);
  TS_CHECK(options.character_coverage == 0.0 ||
               (options.character_coverage >= 0.98 && options.character_coverage <= 1.0),
           "character coverage {} must be 0 (chosen from the text) or in [0.98, 1]", options.character_coverage);
  TS_CHECK(options.max_training_lines > 0, "max_training_lines must be positive, got {}", options.max_training_lines);

  double coverage = options.character_coverage;
  if (coverage == 0.0) coverage = distinct_characters(corpus) <= 1000 ? 1.0 : 0.9995;
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::min(kMaxTrainerThreads, options.threads > 0 ? options.threads : hardware);

  // Exact round trips need the text unchanged: identity normalization, whitespace kept as is and
  // no dummy "▁" prefix. Newlines never reach the trainer (it sees lines); at encode time they
  // fall back to their byte piece <0x0A>.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"character_coverage", fmt::format("{}", coverage)},
      {"num_threads", std::to_string(threads)},
      {"input_sentence_size", std::to_string(options.max_training_lines)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(kMaxTrainingLine + 192)},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  sentencepiece::SetRandomGeneratorSeed(options.seed);
  CorpusLines lines(corpus);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) fail_training(status.ToString(), options, corpus);
  return from_bytes(std::move(model), fmt::format("(trained on {})", corpus.source));
}

}  // namespace tessera::data
