// data.json, opening a prepared dataset, and the checks that tie its files together.
#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/json_input.h"

namespace tessera::data {

namespace fs = std::filesystem;

std::string checksum(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

void check_model_vocab(int64_t model_vocab_size, int64_t data_vocab_size, std::string_view data_name) {
  const int64_t padded = (data_vocab_size + 63) / 64 * 64;
  TS_CHECK(model_vocab_size >= data_vocab_size,
           "model.vocab_size = {} is smaller than the vocabulary of the data ({} ids, from {}): token ids would fall "
           "outside the embedding; set model.vocab_size = {} (or a padded size such as {})",
           model_vocab_size, data_vocab_size, data_name, data_vocab_size, padded);
}

namespace {

nlohmann::json to_json(const DatasetInfo& info) {
  return nlohmann::json{
      {"format", "tessera-dataset"},
      {"vocab_size", info.vocab_size},
      {"train_tokens", info.train_tokens},
      {"val_tokens", info.val_tokens},
      {"val_pieces", info.val_pieces},
      {"val_fraction", info.val_fraction},
      {"documents", info.documents},
      {"corpus_bytes", info.corpus_bytes},
      {"bos_id", info.bos_id},
      {"eos_id", info.eos_id},
      {"token_file_version", info.token_file_version},
      {"source", info.source},
      {"tokenizer", {{"file", "tokenizer.model"}, {"origin", info.tokenizer_origin},
                     {"checksum", info.tokenizer_checksum}}},
      {"files", {{"train", "train.bin"}, {"val", "val.bin"}}},
  };
}

// Reads data.json's fields; every message names the file and says to prepare the data again.
class InfoFields {
 public:
  InfoFields(const nlohmann::json& j, const std::string& file) : j_(j), file_(file) {}

  const nlohmann::json& get(const nlohmann::json& object, const char* key) const {
    TS_CHECK(object.contains(key) && !object.at(key).is_null(),
             "{} has no \"{}\": it is incomplete or from another program; prepare the data again", file_, key);
    return object.at(key);
  }
  // nlohmann would turn 2.5 into 2 and 1e10 into a wrapped int32 without a word: integers are
  // checked as integers and against their range.
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const nlohmann::json& v = get(j_, key);
    const bool integral = v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{1} << 62);
    TS_CHECK(integral && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
             "{}: \"{}\" must be an integer in [{}, {}], got {}; prepare the data again", file_, key, lo, hi,
             shown(v));
    return v.get<int64_t>();
  }
  double number(const char* key) const {
    const nlohmann::json& v = get(j_, key);
    TS_CHECK(v.is_number(), "{}: \"{}\" must be a number, got {}; prepare the data again", file_, key, shown(v));
    return v.get<double>();
  }
  std::string string(const nlohmann::json& object, const char* key) const {
    const nlohmann::json& v = get(object, key);
    TS_CHECK(v.is_string(), "{}: \"{}\" must be a string, got {}; prepare the data again", file_, key, shown(v));
    return v.get<std::string>();
  }

 private:
  static std::string shown(const nlohmann::json& v) {
    std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return text.size() > 80 ? text.substr(0, 77) + "..." : text;
  }
  const nlohmann::json& j_;
  const std::string& file_;
};

}  // namespace

void write_dataset_info(const fs::path& dir, const DatasetInfo& info) {
  write_file_atomically(dir / "data.json", to_json(info).dump(2) + "\n");
}

DatasetInfo parse_dataset_info(std::string_view text, const fs::path& path) {
  return parse_dataset_info(text, path, SplitCheck::Yes);
}

namespace {

// The split takes round(fraction × tokens) validation tokens (split_train_val). Which of the three
// fields is wrong only the token files can tell, so open_dataset checks them against the files first.
void check_split(const DatasetInfo& info, const std::string& file) {
  const int64_t total = info.train_tokens + info.val_tokens;
  const auto expected_val = static_cast<int64_t>(std::llround(info.val_fraction * static_cast<double>(total)));
  TS_CHECK(expected_val == info.val_tokens,
           "{}: \"val_fraction\" = {} of {} tokens is {} validation tokens, but \"val_tokens\" says {}; prepare the "
           "data again", file, info.val_fraction, total, expected_val, info.val_tokens);
}

}  // namespace

DatasetInfo parse_dataset_info(std::string_view text, const fs::path& path, SplitCheck split) {
  const std::string file = path.string();
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, file);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("{} is not valid JSON ({}); prepare the data again", file, e.what());
  }
  TS_CHECK(j.is_object() && j.contains("format") && j.at("format") == "tessera-dataset",
           "{} is not a tessera dataset description (no \"format\": \"tessera-dataset\")", file);
  const InfoFields f(j, file);
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  DatasetInfo info;
  // Token ids are int32 and a token file counts at most 2^31 - 1 tokens.
  info.vocab_size = f.integer("vocab_size", 1, kInt32Max);
  info.train_tokens = f.integer("train_tokens", 0, kInt32Max);
  info.val_tokens = f.integer("val_tokens", 0, kInt32Max);
  info.val_pieces = f.integer("val_pieces", 0, kInt32Max);
  info.val_fraction = f.number("val_fraction");
  info.documents = f.integer("documents", 0, std::numeric_limits<int64_t>::max());
  info.corpus_bytes = f.integer("corpus_bytes", 0, std::numeric_limits<int64_t>::max());
  info.bos_id = static_cast<int32_t>(f.integer("bos_id", -1, kInt32Max));
  info.eos_id = static_cast<int32_t>(f.integer("eos_id", -1, kInt32Max));
  info.token_file_version = static_cast<int>(f.integer("token_file_version", std::numeric_limits<int32_t>::min(), kInt32Max));
  info.source = f.string(j, "source");
  const nlohmann::json& tokenizer = f.get(j, "tokenizer");
  TS_CHECK(tokenizer.is_object(), "{}: \"tokenizer\" must be an object with origin and checksum; prepare the data again",
           file);
  info.tokenizer_origin = f.string(tokenizer, "origin");
  info.tokenizer_checksum = f.string(tokenizer, "checksum");

  // What the numbers claim must be possible: each is what `tessera data prepare` would write.
  for (const auto& [key, id] : {std::pair{"bos_id", info.bos_id}, std::pair{"eos_id", info.eos_id}}) {
    TS_CHECK(id == -1 || id < info.vocab_size,
             "{}: \"{}\" = {} is outside the vocabulary [0, {}) (-1 means none); prepare the data again", file, key, id,
             info.vocab_size);
  }
  TS_CHECK(info.token_file_version == 1 || info.token_file_version == 2,
           "{}: \"token_file_version\" = {} is unknown: known are 1 (uint16 tokens) and 2 (uint32 tokens); prepare the "
           "data again", file, info.token_file_version);
  TS_CHECK(info.token_file_version == token_file_version_for_vocab(info.vocab_size),
           "{}: \"token_file_version\" = {} does not fit a vocabulary of {} ids, whose token files are version {}; "
           "prepare the data again", file, info.token_file_version, info.vocab_size,
           token_file_version_for_vocab(info.vocab_size));
  const int64_t total = info.train_tokens + info.val_tokens;
  TS_CHECK(std::isfinite(info.val_fraction) && info.val_fraction >= 0.0 && info.val_fraction < 1.0,
           "{}: \"val_fraction\" = {} must be in [0, 1); prepare the data again", file, info.val_fraction);
  TS_CHECK((info.val_tokens == 0 && info.val_pieces == 0) ||
               (info.val_tokens > 0 && info.val_pieces >= 1 && info.val_pieces <= info.val_tokens),
           "{}: \"val_pieces\" = {} is impossible for {} validation tokens; prepare the data again", file,
           info.val_pieces, info.val_tokens);
  TS_CHECK(info.documents >= 1, "{}: \"documents\" = {}: a dataset is made from at least one document; prepare the "
           "data again", file, info.documents);
  // Every document ends with the end-of-sequence token, when the tokenizer has one.
  TS_CHECK(info.eos_id < 0 || info.documents <= total,
           "{}: \"documents\" = {} is more than the {} tokens, though each document ends with an end-of-sequence "
           "token; prepare the data again", file, info.documents, total);
  TS_CHECK(info.corpus_bytes >= 1, "{}: \"corpus_bytes\" = {}: a dataset is made from a non-empty corpus; prepare the "
           "data again", file, info.corpus_bytes);
  if (split == SplitCheck::Yes) check_split(info, file);
  return info;
}

DatasetInfo read_dataset_info(const fs::path& dir, SplitCheck split) {
  const fs::path path = dir / "data.json";
  std::error_code ec;
  TS_CHECK(fs::is_regular_file(path, ec),
           "cannot open {}: {} is not a prepared dataset; make one with `tessera data prepare --out {}`",
           path.string(), dir.string(), dir.string());
  // data.json is a few hundred bytes; a file far larger is not one.
  constexpr uintmax_t kMaxBytes = 1 << 20;
  const uintmax_t size = fs::file_size(path, ec);
  TS_CHECK(!ec && size <= kMaxBytes, "{} is {} bytes, far more than a dataset description; prepare the data again",
           path.string(), size);
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot open {}: {} is not a prepared dataset; make one with `tessera data prepare --out {}`",
           path.string(), dir.string(), dir.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_dataset_info(text, path, split);
}

namespace {

// Occurrences of `id` in a token file (one pass, in blocks).
int64_t count_token(const TokenFile& file, int32_t id) {
  std::vector<int32_t> block(1 << 16);
  int64_t count = 0;
  for (int64_t begin = 0; begin < file.size(); begin += static_cast<int64_t>(block.size())) {
    const auto n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(block.size()), file.size() - begin));
    file.read(begin, std::span<int32_t>(block.data(), n));
    count += std::count(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n), id);
  }
  return count;
}

}  // namespace

Dataset open_dataset(const fs::path& dir) {
  DatasetInfo info = read_dataset_info(dir, SplitCheck::AfterTheTokenFiles);
  const std::string json_path = (dir / "data.json").string();
  const fs::path model = dir / "tokenizer.model";
  Tokenizer tokenizer = Tokenizer::load(model);
  const std::string sum = checksum(tokenizer.serialized());
  TS_CHECK(sum == info.tokenizer_checksum,
           "{} does not match data.json (checksum {}, expected {}): the tokenizer file is corrupt or was replaced; "
           "prepare the data again", model.string(), sum, info.tokenizer_checksum);
  TS_CHECK(tokenizer.vocab_size() == info.vocab_size, "{} has {} pieces but data.json says vocab_size {}",
           model.string(), tokenizer.vocab_size(), info.vocab_size);
  TS_CHECK(tokenizer.bos_id() == info.bos_id && tokenizer.eos_id() == info.eos_id,
           "{} says bos_id {} and eos_id {} but its tokenizer has {} and {}; prepare the data again", json_path,
           info.bos_id, info.eos_id, tokenizer.bos_id(), tokenizer.eos_id());
  auto train = TokenFile::open(dir / "train.bin", info.vocab_size);
  auto val = TokenFile::open(dir / "val.bin", info.vocab_size);
  TS_CHECK(train->size() == info.train_tokens,
           "{} holds {} tokens but {} says \"train_tokens\": {}: data.json was edited or train.bin replaced; prepare "
           "the data again", (dir / "train.bin").string(), train->size(), json_path, info.train_tokens);
  TS_CHECK(val->size() == info.val_tokens,
           "{} holds {} tokens but {} says \"val_tokens\": {}: data.json was edited or val.bin replaced; prepare the "
           "data again", (dir / "val.bin").string(), val->size(), json_path, info.val_tokens);
  check_split(info, json_path);
  TS_CHECK(train->version() == info.token_file_version && val->version() == info.token_file_version,
           "the token files in {} are versions {} (train) and {} (val) but data.json says {}; prepare the data again",
           dir.string(), train->version(), val->version(), info.token_file_version);
  if (info.eos_id >= 0) {
    // Each document ends with one end-of-sequence token and encoding text never makes one.
    const int64_t ends = count_token(*train, info.eos_id) + count_token(*val, info.eos_id);
    TS_CHECK(ends == info.documents,
             "{} says {} documents but the token files hold {} end-of-sequence tokens (one ends each document); "
             "prepare the data again", json_path, info.documents, ends);
  }
  return Dataset{std::move(info), std::move(tokenizer), std::move(train), std::move(val)};
}

}  // namespace tessera::data
