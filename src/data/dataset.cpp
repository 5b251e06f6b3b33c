// data.json, opening a prepared dataset, and the checks that tie its files together.
#include "data/dataset.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/atomic_file.h"
#include "core/check.h"

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

template <typename T>
T field(const nlohmann::json& j, const char* key, const fs::path& file) {
  TS_CHECK(j.contains(key), "{} has no \"{}\": it is incomplete or from another program; prepare the data again",
           file.string(), key);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("{}: \"{}\" has the wrong type ({}); prepare the data again", file.string(), key, e.what());
  }
}

}  // namespace

void write_dataset_info(const fs::path& dir, const DatasetInfo& info) {
  write_file_atomically(dir / "data.json", to_json(info).dump(2) + "\n");
}

DatasetInfo read_dataset_info(const fs::path& dir) {
  const fs::path path = dir / "data.json";
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot open {}: {} is not a prepared dataset; make one with `tessera data prepare --out {}`",
           path.string(), dir.string(), dir.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("{} is not valid JSON ({}); prepare the data again", path.string(), e.what());
  }
  TS_CHECK(j.is_object() && j.value("format", "") == "tessera-dataset",
           "{} is not a tessera dataset description (no \"format\": \"tessera-dataset\")", path.string());
  DatasetInfo info;
  info.vocab_size = field<int64_t>(j, "vocab_size", path);
  info.train_tokens = field<int64_t>(j, "train_tokens", path);
  info.val_tokens = field<int64_t>(j, "val_tokens", path);
  info.val_pieces = field<int64_t>(j, "val_pieces", path);
  info.val_fraction = field<double>(j, "val_fraction", path);
  info.documents = field<int64_t>(j, "documents", path);
  info.corpus_bytes = field<int64_t>(j, "corpus_bytes", path);
  info.bos_id = field<int32_t>(j, "bos_id", path);
  info.eos_id = field<int32_t>(j, "eos_id", path);
  info.token_file_version = field<int>(j, "token_file_version", path);
  info.source = field<std::string>(j, "source", path);
  const auto tokenizer = field<nlohmann::json>(j, "tokenizer", path);
  info.tokenizer_origin = field<std::string>(tokenizer, "origin", path);
  info.tokenizer_checksum = field<std::string>(tokenizer, "checksum", path);
  TS_CHECK(info.vocab_size > 0 && info.train_tokens >= 0 && info.val_tokens >= 0,
           "{} has impossible counts (vocab_size {}, train_tokens {}, val_tokens {})", path.string(), info.vocab_size,
           info.train_tokens, info.val_tokens);
  return info;
}

Dataset open_dataset(const fs::path& dir) {
  DatasetInfo info = read_dataset_info(dir);
  const fs::path model = dir / "tokenizer.model";
  Tokenizer tokenizer = Tokenizer::load(model);
  const std::string sum = checksum(tokenizer.serialized());
  TS_CHECK(sum == info.tokenizer_checksum,
           "{} does not match data.json (checksum {}, expected {}): the tokenizer file is corrupt or was replaced; "
           "prepare the data again", model.string(), sum, info.tokenizer_checksum);
  TS_CHECK(tokenizer.vocab_size() == info.vocab_size, "{} has {} pieces but data.json says vocab_size {}",
           model.string(), tokenizer.vocab_size(), info.vocab_size);
  auto train = TokenFile::open(dir / "train.bin", info.vocab_size);
  auto val = TokenFile::open(dir / "val.bin", info.vocab_size);
  TS_CHECK(train->size() == info.train_tokens && val->size() == info.val_tokens,
           "the token files in {} hold {} train and {} val tokens but data.json says {} and {}; prepare the data again",
           dir.string(), train->size(), val->size(), info.train_tokens, info.val_tokens);
  return Dataset{std::move(info), std::move(tokenizer), std::move(train), std::move(val)};
}

}  // namespace tessera::data
