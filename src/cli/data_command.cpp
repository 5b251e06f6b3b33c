// `tessera data prepare`: make a dataset folder from a corpus; `tessera data info`: describe one.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "core/check.h"
#include "data/dataset.h"
#include "train/checkpoint.h"

namespace tessera::cli {

namespace {

// More threads than this is a typo, not a machine: each one is a real thread for encoding.
constexpr int kMaxThreads = 1024;

struct PrepareArgs {
  data::PrepareOptions options;
  std::string out;
  std::string tokenizer;
};

struct InfoArgs {
  std::string path;
  int64_t sample = 0;
};

void print_line(const std::string& line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void run_info(const InfoArgs& args) {
  namespace fs = std::filesystem;
  const fs::path path(args.path);
  if (fs::is_directory(path)) {
    const data::Dataset ds = data::open_dataset(path);
    const data::DatasetInfo& i = ds.info;
    print_line(fmt::format("dataset {}: checked (tokenizer checksum, token files, vocabulary)", path.string()));
    print_line(fmt::format("  source      {}", i.source));
    print_line(fmt::format("  corpus      {} document(s), {} bytes", i.documents, i.corpus_bytes));
    print_line(fmt::format("  tokenizer   {} pieces ({}), bos {}, eos {}, {}", i.vocab_size, i.tokenizer_origin, i.bos_id,
                           i.eos_id, i.tokenizer_checksum));
    print_line(fmt::format("  train.bin   {} tokens", i.train_tokens));
    print_line(fmt::format("  val.bin     {} tokens in {} piece(s) (fraction {})", i.val_tokens, i.val_pieces,
                           i.val_fraction));
    print_line(fmt::format("  token file  version {} ({} tokens)", i.token_file_version,
                           i.token_file_version == 1 ? "uint16" : "uint32"));
    if (args.sample > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(std::min<int64_t>(args.sample, ds.train->size())));
      ds.train->read(0, ids);
      print_line(fmt::format("first {} training tokens, decoded:\n{}", ids.size(), ds.tokenizer.decode(ids)));
    }
  } else if (path.extension() == ".model") {
    const data::Tokenizer t = data::Tokenizer::load(path);
    print_line(fmt::format("tokenizer {}: {} pieces, bos {}, eos {}, unk {}, {}", path.string(), t.vocab_size(),
                           t.bos_id(), t.eos_id(), t.unk_id(), data::checksum(t.serialized())));
  } else {
    const auto file = data::TokenFile::open(path);
    print_line(fmt::format("token file {}: version {} ({} bytes per token), {} tokens, vocabulary {}", path.string(),
                           file->version(), file->token_bytes(), file->size(),
                           file->recorded_vocab_size() > 0 ? std::to_string(file->recorded_vocab_size())
                                                          : std::string("not recorded")));
    if (args.sample > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(std::min<int64_t>(args.sample, file->size())));
      file->read(0, ids);
      print_line(fmt::format("first {} tokens: {}", ids.size(), fmt::join(ids, " ")));
    }
  }
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data_cmd = app.add_subcommand("data", "Prepare and inspect training data (corpus, tokenizer, token files)");
  data_cmd->require_subcommand(1);

  auto prepare = std::make_shared<PrepareArgs>();
  CLI::App* prep = data_cmd->add_subcommand(
      "prepare", "Read a corpus, train (or take) a SentencePiece tokenizer, write train/val token files");
  prep->add_option("--input", prepare->options.input,
                    "UTF-8 text file, folder of text files, or 'kjv' for the King James Bible (Debian bible-kjv)")
      ->required();
  prep->add_option("--out", prepare->out, "Dataset folder to write (created if missing)")->required();
  auto* vocab = prep->add_option("--vocab-size", prepare->options.vocab_size,
                                 "Vocabulary size of the tokenizer trained on the corpus")
                    ->capture_default_str();
  prep->add_option("--tokenizer", prepare->tokenizer,
                   "Use this SentencePiece .model instead of training one, or the tokenizer of a checkpoint (a run "
                   "folder, its checkpoints/ folder or a step folder)")
      ->excludes(vocab);
  prep->add_option("--val-fraction", prepare->options.val_fraction,
                   "Fraction of tokens held out for validation, above 0 and at most 0.5")
      ->capture_default_str();
  prep->add_option("--threads", prepare->options.threads, "Threads for tokenizer training and encoding (0: all)")
      ->capture_default_str();
  prep->add_flag("--force", prepare->options.overwrite, "Replace the dataset files already in --out");
  prep->callback([prepare]() {
    // Training reads validation loss, so a dataset without validation tokens would only fail
    // later, at `tessera train`, in terms of seq_len.
    const double fraction = prepare->options.val_fraction;
    TS_CHECK(fraction > 0.0 && fraction <= 0.5,
             "--val-fraction must be above 0 and at most 0.5 (e.g. 0.05), got {}: training measures validation loss "
             "on the held-out tokens",
             fraction);
    TS_CHECK(prepare->options.threads >= 0 && prepare->options.threads <= kMaxThreads,
             "--threads must be between 0 (every hardware thread) and {}, got {}", kMaxThreads,
             prepare->options.threads);
    data::PrepareOptions options = prepare->options;
    options.out = prepare->out;
    options.tokenizer = prepare->tokenizer;
    if (!options.tokenizer.empty() && std::filesystem::is_directory(options.tokenizer)) {
      // A checkpoint: its own copy of the tokenizer it was trained with (for fine-tuning data).
      std::string note, checkpoint;
      try {
        checkpoint = train::resolve_checkpoint(options.tokenizer.string(), "", &note);
      } catch (const Error& e) {
        TS_FAIL("tokenizer path {} is a folder, and not a checkpoint whose tokenizer could be taken ({}); give a "
                "SentencePiece .model file or a checkpoint",
                options.tokenizer.string(), e.what());
      }
      if (!note.empty()) print_line(note);
      options.tokenizer = (std::filesystem::path(checkpoint) / "tokenizer.model").string();
      print_line(fmt::format("tokenizer of checkpoint {}", checkpoint));
    }
    data::prepare_dataset(options, print_line);
  });

  auto info = std::make_shared<InfoArgs>();
  CLI::App* info_cmd = data_cmd->add_subcommand(
      "info", "Check and describe a dataset folder, a token file (.bin) or a tokenizer (.model)");
  info_cmd->add_option("path", info->path, "Dataset folder, token file or tokenizer model")->required();
  info_cmd->add_option("--sample", info->sample, "Also print the first N tokens (decoded for a dataset folder)");
  info_cmd->callback([info]() {
    TS_CHECK(info->sample >= 0, "--sample must be 0 or more (tokens to print), got {}", info->sample);
    run_info(*info);
  });
}

}  // namespace tessera::cli
