#pragma once
// A SentencePiece tokenizer: trained here on a corpus (BPE with byte fallback), or brought as an
// existing `.model` file (a Llama tokenizer, say).
//
// Models trained here round-trip text exactly: decode(encode(x)) == x for any valid UTF-8 x,
// including runs of spaces, tabs, newlines, control characters and any script, with one exception
// that SentencePiece imposes: U+2581 (LOWER ONE EIGHTH BLOCK, "▁") is its whitespace marker, so it
// decodes as a space. Invalid UTF-8 is not text: SentencePiece replaces each byte that does not
// start a valid character with U+FFFD. Corpus preparation rejects such files before they get here.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::data {

struct Corpus;

struct TokenizerTrainOptions {
  int64_t vocab_size = 4096;
  // Fraction of the corpus's characters that get their own pieces; the rest fall back to bytes.
  // 0 chooses from the text: 1.0 for small alphabets (up to 1000 distinct characters, e.g.
  // English), 0.9995 otherwise (the usual choice for CJK and mixed text).
  double character_coverage = 0.0;
  int threads = 0;                        // 0: every hardware thread
  int64_t max_training_lines = 2'000'000;  // bigger corpora are sampled (seeded) down to this many
  uint32_t seed = 1;                      // for that sampling
};

class Tokenizer {
 public:
  // Loads a SentencePiece `.model` file. Throws naming the file when it is missing, unreadable
  // or corrupt.
  static Tokenizer load(const std::filesystem::path& path);
  // Same, from the file's bytes; `what` names them in errors.
  static Tokenizer from_bytes(std::string serialized, std::string_view what);
  // Trains a BPE model with byte fallback on the corpus (see TokenizerTrainOptions).
  static Tokenizer train(const Corpus& corpus, const TokenizerTrainOptions& options);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  // Throws on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;  // -1 when the model has none
  int32_t unk_id() const;
  std::string piece(int32_t id) const;

  // The `.model` bytes, and writing them (atomically: a temporary file, then a rename).
  const std::string& serialized() const { return serialized_; }
  void save(const std::filesystem::path& path) const;

  // True when encoding line by line gives the same ids as encoding the whole text (no piece holds
  // a newline, no dummy prefix, whitespace kept): encode() then works line by line, which is much
  // faster for long texts and lets callers encode chunks split at newlines in parallel.
  bool splits_at_newlines() const { return splits_at_newlines_; }

 private:
  Tokenizer();
  std::vector<int32_t> encode_whole(std::string_view text) const;
  bool probe_newline_split() const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string serialized_;
  std::string name_;
  std::vector<int32_t> newline_ids_;
  bool splits_at_newlines_ = false;
};

}  // namespace tessera::data
