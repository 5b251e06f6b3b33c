#pragma once
// A prepared dataset is a folder:
//   tokenizer.model   the SentencePiece model the tokens were made with
//   train.bin         training tokens (llm.c token file, see token_file.h)
//   val.bin           validation tokens
//   data.json         vocabulary size, token counts, source, tokenizer checksum
// `tessera data prepare` makes it (prepare_dataset); the trainer opens it (open_dataset), which
// checks that the pieces belong together before any training step runs.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace tessera::data {

struct PrepareOptions {
  std::string input;                 // a text file, a folder of them, or "kjv"
  std::filesystem::path out;         // the dataset folder (created if missing)
  int64_t vocab_size = 4096;         // for a tokenizer trained on the corpus
  std::filesystem::path tokenizer;   // an existing .model file instead of training one
  double val_fraction = 0.05;        // in [0, 0.5]
  int threads = 0;                   // 0: every hardware thread
  bool overwrite = false;            // replace the files of a dataset already in `out` (--force)
  std::string bible_program = "bible";
};

struct DatasetInfo {
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t val_pieces = 0;
  int64_t documents = 0;
  int64_t corpus_bytes = 0;
  double val_fraction = 0.0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int token_file_version = 1;
  std::string source;
  std::string tokenizer_origin;    // "trained" or the path of the given .model
  std::string tokenizer_checksum;  // checksum() of tokenizer.model
};

// Progress lines ("training tokenizer ...", counts, seconds); may be empty.
using ProgressLog = std::function<void(const std::string&)>;

DatasetInfo prepare_dataset(const PrepareOptions& options, const ProgressLog& log = {});

struct Dataset {
  DatasetInfo info;
  Tokenizer tokenizer;
  std::shared_ptr<const TokenFile> train;
  std::shared_ptr<const TokenFile> val;
};

// Opens a prepared folder and checks it: data.json readable, complete and possible, the tokenizer
// intact (checksum) with the recorded bos/eos ids, token files valid with every token inside the
// vocabulary and the recorded counts, versions and documents (one end-of-sequence token each).
Dataset open_dataset(const std::filesystem::path& dir);

// Whether data.json's split (train_tokens, val_tokens, val_fraction) is checked as it is read, or
// left for after the token files, which can tell which of the three fields is wrong.
enum class SplitCheck { Yes, AfterTheTokenFiles };

DatasetInfo read_dataset_info(const std::filesystem::path& dir, SplitCheck split = SplitCheck::Yes);
// Parses and checks data.json's text (`path` names it in messages): every field of its type and
// range, and what the numbers claim possible (ids inside the vocabulary, a known token-file
// version, a split that matches val_fraction, documents that fit the tokens).
DatasetInfo parse_dataset_info(std::string_view text, const std::filesystem::path& path);
DatasetInfo parse_dataset_info(std::string_view text, const std::filesystem::path& path, SplitCheck split);
// Writes DIR/data.json atomically.
void write_dataset_info(const std::filesystem::path& dir, const DatasetInfo& info);

// The model's vocabulary must hold every id of the data's (a larger, padded one is fine).
void check_model_vocab(int64_t model_vocab_size, int64_t data_vocab_size, std::string_view data_name);

// "fnv1a64:<16 hex digits>" of the bytes: catches a replaced or damaged tokenizer file.
std::string checksum(std::string_view bytes);

// Encodes every document and ends each with the tokenizer's EOS id (when it has one), so the
// model sees where a document stops. Long documents are encoded in parallel chunks split at
// newlines when the tokenizer allows it (Tokenizer::splits_at_newlines); the ids are the same.
std::vector<int32_t> encode_corpus(const Tokenizer& tokenizer, const Corpus& corpus, int threads);

// Splits a token stream into training and validation tokens. The validation tokens are
// round(fraction·n) tokens taken as K equal pieces spread evenly over the stream (K = one per 4096
// validation tokens, between 1 and 32), so validation samples the whole corpus rather than only
// its end; each piece ends one K-th of the way further. The rest, in order, is training data.
struct TrainValSplit {
  std::vector<int32_t> train;
  std::vector<int32_t> val;
  int64_t val_pieces = 0;
};
TrainValSplit split_train_val(std::span<const int32_t> tokens, double val_fraction);

}  // namespace tessera::data
