// `tessera data prepare`: corpus -> tokenizer -> tokens -> train/val token files + data.json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "data/dataset.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

// Chunks of about this many bytes, cut after a newline, are the units of parallel encoding.
constexpr size_t kEncodeChunk = size_t{1} << 18;
// One validation piece per this many validation tokens (at most kMaxValPieces).
constexpr int64_t kValPieceTokens = 4096;
constexpr int64_t kMaxValPieces = 32;
// Fewer validation tokens than this (one sequence of GPT-2's context and its targets) are said.
constexpr size_t kSmallValidationTokens = 1024;

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::string megabytes(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6); }

// Checked before the slow steps: a dataset that took an hour to prepare, or that runs were trained
// on, is not replaced by a typo in --out. Other files in the folder are left alone either way.
void check_output_folder(const fs::path& out, bool overwrite) {
  std::error_code ec;
  const fs::file_status status = fs::status(out, ec);
  if (!fs::exists(status)) return;
  TS_CHECK(fs::is_directory(status), "--out {} exists and is not a folder; give a folder for the dataset",
           out.string());
  if (overwrite) return;
  std::string found;
  for (const char* name : {"data.json", "tokenizer.model", "train.bin", "val.bin"}) {
    if (fs::exists(out / name, ec)) found += (found.empty() ? "" : ", ") + std::string(name);
  }
  TS_CHECK(found.empty(),
           "--out {} already holds a dataset ({}); give another --out, or add --force to replace its files",
           out.string(), found);
}

}  // namespace

std::vector<int32_t> encode_corpus(const Tokenizer& tokenizer, const Corpus& corpus, int threads) {
  // Cut every document into chunks; a chunk ends after a newline (or at the document's end), so
  // encoding chunk by chunk equals encoding the document when the tokenizer splits at newlines.
  struct Chunk {
    size_t doc, begin, end;
  };
  std::vector<Chunk> chunks;
  for (size_t d = 0; d < corpus.documents.size(); ++d) {
    const std::string& text = corpus.documents[d].text;
    if (text.empty()) continue;  // an empty file adds nothing, not even an EOS
    if (!tokenizer.splits_at_newlines()) {
      chunks.push_back({d, 0, text.size()});
      continue;
    }
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = std::min(text.size(), begin + kEncodeChunk);
      if (end < text.size()) {
        const size_t newline = text.find('\n', end);
        end = newline == std::string::npos ? text.size() : newline + 1;
      }
      chunks.push_back({d, begin, end});
      begin = end;
    }
  }
  std::vector<std::vector<int32_t>> encoded(chunks.size());
  const int n = static_cast<int>(chunks.size());
  const int workers = threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Exceptions must not cross the OpenMP region: the first message is kept and rethrown after it.
  std::string failure;
#pragma omp parallel for schedule(dynamic, 1) num_threads(workers)
  for (int i = 0; i < n; ++i) {
    try {
      const Chunk& c = chunks[static_cast<size_t>(i)];
      const std::string& text = corpus.documents[c.doc].text;
      encoded[static_cast<size_t>(i)] = tokenizer.encode(std::string_view(text).substr(c.begin, c.end - c.begin));
    } catch (const std::exception& e) {
#pragma omp critical(tessera_encode_failure)
      if (failure.empty()) failure = e.what();
    }
  }
  TS_CHECK(failure.empty(), "encoding the corpus failed: {}", failure);

  size_t total = 0;
  for (const auto& e : encoded) total += e.size();
  std::vector<int32_t> tokens;
  tokens.reserve(total + corpus.documents.size());
  const int32_t eos = tokenizer.eos_id();
  for (size_t i = 0; i < chunks.size(); ++i) {
    tokens.insert(tokens.end(), encoded[i].begin(), encoded[i].end());
    const bool last_of_doc = i + 1 == chunks.size() || chunks[i + 1].doc != chunks[i].doc;
    if (last_of_doc && eos >= 0) tokens.push_back(eos);
  }
  return tokens;
}

TrainValSplit split_train_val(std::span<const int32_t> tokens, double val_fraction) {
  TS_CHECK(val_fraction >= 0.0 && val_fraction <= 0.5, "val fraction {} must be in [0, 0.5]", val_fraction);
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_val = static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(n)));
  TrainValSplit split;
  if (n_val == 0) {
    split.train.assign(tokens.begin(), tokens.end());
    return split;
  }
  const int64_t pieces = std::clamp<int64_t>(n_val / kValPieceTokens, 1, kMaxValPieces);
  const int64_t stride = n / pieces;
  split.val_pieces = pieces;
  split.train.reserve(static_cast<size_t>(n - n_val));
  split.val.reserve(static_cast<size_t>(n_val));
  int64_t pos = 0;
  for (int64_t k = 0; k < pieces; ++k) {
    // Piece k is the end of stride k; n_val <= n/2 keeps it inside the stride.
    const int64_t len = n_val * (k + 1) / pieces - n_val * k / pieces;
    const int64_t val_end = (k + 1) * stride;
    const int64_t val_begin = val_end - len;
    split.train.insert(split.train.end(), tokens.begin() + pos, tokens.begin() + val_begin);
    split.val.insert(split.val.end(), tokens.begin() + val_begin, tokens.begin() + val_end);
    pos = val_end;
  }
  split.train.insert(split.train.end(), tokens.begin() + pos, tokens.end());
  return split;
}

DatasetInfo prepare_dataset(const PrepareOptions& options, const ProgressLog& log_fn) {
  auto log = [&](const std::string& line) {
    if (log_fn) log_fn(line);
  };
  TS_CHECK(!options.input.empty(), "no input corpus: give --input PATH (a UTF-8 text file or folder) or --input kjv");
  TS_CHECK(!options.out.empty(), "no output folder: give --out DIR");
  TS_CHECK(options.val_fraction >= 0.0 && options.val_fraction <= 0.5,
           "--val-fraction {} must be in [0, 0.5] (e.g. 0.05)", options.val_fraction);
  TS_CHECK(options.threads >= 0, "--threads must be 0 (every hardware thread) or more, got {}", options.threads);
  // Tokenizer::train checks this too, but only after the corpus is read.
  TS_CHECK(!options.tokenizer.empty() || (options.vocab_size >= 260 && options.vocab_size <= (int64_t{1} << 31) - 1),
           "--vocab-size {} is out of range: byte fallback needs 259 ids for bytes and special tokens, so choose at "
           "least 260 (e.g. 4096)",
           options.vocab_size);
  check_output_folder(options.out, options.overwrite);
  const Stopwatch total;

  // Load the given tokenizer first: a bad file fails before the slow steps.
  std::optional<Tokenizer> tokenizer;
  if (!options.tokenizer.empty()) tokenizer = Tokenizer::load(options.tokenizer);

  Stopwatch step;
  Corpus corpus;
  if (options.input == "kjv") {
    log("reading the King James Bible (bible -f Gen1:1-Rev22:21, Debian bible-kjv), stripping verse references");
    corpus = read_kjv_corpus(options.bible_program);
  } else {
    log(fmt::format("reading corpus {}", options.input));
    corpus = read_text_corpus(options.input);
  }
  log(fmt::format("  {} document(s), {}, {:.1f} s", corpus.documents.size(), megabytes(corpus.bytes()),
                  step.seconds()));

  step = Stopwatch();
  if (tokenizer) {
    log(fmt::format("using tokenizer {} ({} pieces)", options.tokenizer.string(), tokenizer->vocab_size()));
  } else {
    log(fmt::format("training tokenizer: SentencePiece BPE, byte fallback, vocab size {}", options.vocab_size));
    TokenizerTrainOptions train_options;
    train_options.vocab_size = options.vocab_size;
    train_options.threads = options.threads;
    tokenizer = Tokenizer::train(corpus, train_options);
    log(fmt::format("  {} pieces, {:.1f} s", tokenizer->vocab_size(), step.seconds()));
  }

  step = Stopwatch();
  log("encoding");
  const std::vector<int32_t> tokens = encode_corpus(*tokenizer, corpus, options.threads);
  log(fmt::format("  {} tokens ({:.2f} bytes per token), {:.1f} s", tokens.size(),
                  tokens.empty() ? 0.0 : static_cast<double>(corpus.bytes()) / static_cast<double>(tokens.size()),
                  step.seconds()));

  TrainValSplit split = split_train_val(tokens, options.val_fraction);
  log(fmt::format("split: {} train tokens, {} val tokens in {} piece(s)", split.train.size(), split.val.size(),
                  split.val_pieces));
  if (options.val_fraction > 0 && split.val.empty()) {
    log("  warning: the corpus is too small for any validation tokens at this fraction");
  } else if (!split.val.empty() && split.val.size() <= kSmallValidationTokens) {
    // Every run evaluates at its end, on whole sequences of seq_len + 1 tokens.
    log(fmt::format("  warning: {} validation tokens hold no sequence of model.seq_len {} or more: a run of a "
                    "longer context is refused; a larger --val-fraction (or corpus) gives it some",
                    split.val.size(), split.val.size()));
  }

  std::error_code ec;
  fs::create_directories(options.out, ec);
  TS_CHECK(!ec, "cannot create output folder {}: {}", options.out.string(), ec.message());
  // data.json goes last and marks the folder complete: drop an old one first, so a failure below
  // cannot leave old metadata beside new files.
  fs::remove(options.out / "data.json", ec);

  DatasetInfo info;
  info.vocab_size = tokenizer->vocab_size();
  info.train_tokens = static_cast<int64_t>(split.train.size());
  info.val_tokens = static_cast<int64_t>(split.val.size());
  info.val_pieces = split.val_pieces;
  info.val_fraction = options.val_fraction;
  info.documents = static_cast<int64_t>(corpus.documents.size());
  info.corpus_bytes = corpus.bytes();
  info.bos_id = tokenizer->bos_id();
  info.eos_id = tokenizer->eos_id();
  info.token_file_version = token_file_version_for_vocab(info.vocab_size);
  info.source = corpus.source;
  info.tokenizer_origin = options.tokenizer.empty() ? "trained" : options.tokenizer.string();
  info.tokenizer_checksum = checksum(tokenizer->serialized());

  tokenizer->save(options.out / "tokenizer.model");
  write_token_file(options.out / "train.bin", split.train, info.vocab_size);
  write_token_file(options.out / "val.bin", split.val, info.vocab_size);
  write_dataset_info(options.out, info);
  log(fmt::format("wrote {}: tokenizer.model, train.bin ({}), val.bin ({}), data.json; {:.1f} s in all",
                  options.out.string(),
                  megabytes(kTokenFileHeaderBytes + info.train_tokens * (info.token_file_version == 1 ? 2 : 4)),
                  megabytes(kTokenFileHeaderBytes + info.val_tokens * (info.token_file_version == 1 ? 2 : 4)),
                  total.seconds()));
  return info;
}

}  // namespace tessera::data
