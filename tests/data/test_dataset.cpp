// Preparing and opening dataset folders: the whole pipeline on a small corpus, the train/val
// split, and the checks that catch mismatched or damaged pieces.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "data/dataset.h"
#include "data/loader.h"
#include "test_util.h"

namespace tessera::data {
namespace {

using testing::make_text;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

class PreparedDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "corpus");
    write_bytes(dir_ / "corpus/1.txt", make_text(1500, 1));
    write_bytes(dir_ / "corpus/2.txt", make_text(1500, 2));
  }
  PrepareOptions options(double val_fraction = 0.1) const {
    PrepareOptions o;
    o.input = (dir_ / "corpus").string();
    o.out = dir_ / "out";
    o.vocab_size = 320;
    o.val_fraction = val_fraction;
    o.threads = 2;
    return o;
  }
  ScratchDir dir_;
};

TEST_F(PreparedDataset, WritesAllFilesAndOpensChecked) {
  std::vector<std::string> progress;
  const DatasetInfo info = prepare_dataset(options(), [&](const std::string& line) { progress.push_back(line); });
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin", "data.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_ / "out" / name)) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/train.bin.tmp"));
  EXPECT_GE(progress.size(), 5u);

  EXPECT_EQ(info.vocab_size, 320);
  EXPECT_EQ(info.documents, 2);
  EXPECT_EQ(info.tokenizer_origin, "trained");
  const int64_t total = info.train_tokens + info.val_tokens;
  EXPECT_NEAR(static_cast<double>(info.val_tokens), 0.1 * static_cast<double>(total), 1.0);

  const Dataset ds = open_dataset(dir_ / "out");
  EXPECT_EQ(ds.info.train_tokens, info.train_tokens);
  EXPECT_EQ(ds.info.tokenizer_checksum, checksum(read_bytes(dir_ / "out/tokenizer.model")));
  EXPECT_EQ(ds.train->size(), info.train_tokens);
  EXPECT_EQ(ds.val->size(), info.val_tokens);
  EXPECT_EQ(ds.tokenizer.vocab_size(), 320);

  const auto json = nlohmann::json::parse(read_bytes(dir_ / "out/data.json"));
  EXPECT_EQ(json.at("vocab_size").get<int64_t>(), 320);
  EXPECT_EQ(json.at("train_tokens").get<int64_t>(), info.train_tokens);
  EXPECT_EQ(json.at("tokenizer").at("checksum").get<std::string>(), info.tokenizer_checksum);

  // The train file feeds the loader directly.
  TokenLoader loader(ds.train, {.seq_len = 32, .global_batch = 4, .seed = 1});
  EXPECT_EQ(loader.next().rows, 4);
}

TEST_F(PreparedDataset, TokensDecodeBackToTheCorpusWithEosBetweenDocuments) {
  prepare_dataset(options(0.0));
  const Dataset ds = open_dataset(dir_ / "out");
  EXPECT_EQ(ds.val->size(), 0);
  std::vector<int32_t> tokens(static_cast<size_t>(ds.train->size()));
  ds.train->read(0, tokens);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), ds.tokenizer.eos_id()), 2);
  EXPECT_EQ(tokens.back(), ds.tokenizer.eos_id());
  EXPECT_EQ(ds.tokenizer.decode(tokens), make_text(1500, 1) + make_text(1500, 2));
}

TEST_F(PreparedDataset, UsesAGivenTokenizerFile) {
  prepare_dataset(options());
  std::filesystem::copy_file(dir_ / "out/tokenizer.model", dir_ / "mine.model");
  PrepareOptions o = options();
  o.out = dir_ / "out2";
  o.tokenizer = dir_ / "mine.model";
  o.vocab_size = 9999;  // ignored: the given model decides
  const DatasetInfo info = prepare_dataset(o);
  EXPECT_EQ(info.vocab_size, 320);
  EXPECT_EQ(info.tokenizer_origin, (dir_ / "mine.model").string());
  EXPECT_EQ(read_bytes(dir_ / "out2/train.bin"), read_bytes(dir_ / "out/train.bin"));
}

TEST_F(PreparedDataset, ReplacedOrDamagedTokenizerFailsTheChecksum) {
  prepare_dataset(options());
  const std::string model = read_bytes(dir_ / "out/tokenizer.model");
  // SentencePiece itself accepts many one-byte changes (inside a piece's text); find one and check
  // that the dataset's checksum catches it.
  bool tested = false;
  for (size_t at = model.size() / 3; at < model.size() && !tested; ++at) {
    std::string flipped = model;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x01);
    try {
      Tokenizer::from_bytes(flipped, "probe");
    } catch (const Error&) {
      continue;
    }
    write_bytes(dir_ / "out/tokenizer.model", flipped);
    EXPECT_ERROR_WITH(open_dataset(dir_ / "out"), "tokenizer.model", "does not match data.json", "corrupt");
    tested = true;
  }
  EXPECT_TRUE(tested) << "no loadable one-byte change found";
  write_bytes(dir_ / "out/tokenizer.model", model.substr(0, model.size() / 2));
  EXPECT_ERROR_WITH(open_dataset(dir_ / "out"), "tokenizer.model", "corrupt");
}

TEST_F(PreparedDataset, DamagedTokenFilesAndMetadataAreClearErrors) {
  prepare_dataset(options());
  const std::filesystem::path out = dir_ / "out";
  const std::string train = read_bytes(out / "train.bin");
  write_bytes(out / "train.bin", train.substr(0, train.size() - 10));
  EXPECT_ERROR_WITH(open_dataset(out), "train.bin", "truncated");
  write_bytes(out / "train.bin", train);

  const std::string val = read_bytes(out / "val.bin");
  write_bytes(out / "val.bin", read_bytes(out / "train.bin"));  // a valid file, but not this one
  EXPECT_ERROR_WITH(open_dataset(out), "data.json says");
  write_bytes(out / "val.bin", val);
  EXPECT_NO_THROW(open_dataset(out));

  const std::string json = read_bytes(out / "data.json");
  write_bytes(out / "data.json", json.substr(0, json.size() / 2));
  EXPECT_ERROR_WITH(open_dataset(out), "data.json", "not valid JSON");
  auto j = nlohmann::json::parse(json);
  j.erase("train_tokens");
  write_bytes(out / "data.json", j.dump());
  EXPECT_ERROR_WITH(open_dataset(out), "no \"train_tokens\"");
  std::filesystem::remove(out / "data.json");
  EXPECT_ERROR_WITH(open_dataset(out), "not a prepared dataset", "tessera data prepare");
}

// What data.json claims must be possible and must match the files: each edit alone is refused,
// naming the file and the field, before the dataset is called checked.
TEST_F(PreparedDataset, ImpossibleClaimsInDataJsonAreRefused) {
  const DatasetInfo info = prepare_dataset(options());
  const std::filesystem::path out = dir_ / "out";
  const std::string original = read_bytes(out / "data.json");
  const auto good = nlohmann::json::parse(original);
  struct Edit {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  const int64_t total = info.train_tokens + info.val_tokens;
  const std::vector<Edit> edits = {
      {"eos_id", 320, "\"eos_id\" = 320 is outside the vocabulary"},
      {"bos_id", 5000, "\"bos_id\" = 5000 is outside the vocabulary"},
      {"eos_id", -2, "\"eos_id\" must be an integer in [-1"},
      {"eos_id", 1e10, "\"eos_id\" must be an integer"},
      {"bos_id", info.bos_id == 4 ? 5 : 4, "bos_id"},  // inside the vocabulary, not the tokenizer's
      {"token_file_version", 3, "\"token_file_version\" = 3 is unknown"},
      {"token_file_version", 2, "does not fit a vocabulary of 320 ids"},
      {"documents", -1, "\"documents\" must be an integer"},
      {"documents", 0, "at least one document"},
      {"documents", total + 1, "is more than the"},
      {"documents", 3, "end-of-sequence tokens"},  // possible, but not what the files hold
      {"val_fraction", 0.0, "validation tokens, but \"val_tokens\" says"},
      {"val_fraction", 1.5, "must be in [0, 1)"},
      {"val_fraction", -0.1, "must be in [0, 1)"},
      {"val_fraction", "a tenth", "\"val_fraction\" must be a number"},
      {"val_pieces", 0, "\"val_pieces\" = 0 is impossible"},
      {"train_tokens", 2.5, "\"train_tokens\" must be an integer"},
      {"vocab_size", 0, "\"vocab_size\" must be an integer in [1"},
      {"corpus_bytes", 0, "non-empty corpus"},
      {"source", 7, "\"source\" must be a string"},
      {"tokenizer", "tokenizer.model", "\"tokenizer\" must be an object"},
  };
  for (const Edit& e : edits) {
    auto j = good;
    j[e.key] = e.value;
    write_bytes(out / "data.json", j.dump(2));
    EXPECT_ERROR_WITH(open_dataset(out), "data.json", e.message);
  }
  // Counts that agree with each other but not with the files.
  {
    auto j = good;
    j["train_tokens"] = info.train_tokens + 1;
    j["val_fraction"] = static_cast<double>(info.val_tokens) / static_cast<double>(total + 1);
    write_bytes(out / "data.json", j.dump(2));
    EXPECT_ERROR_WITH(open_dataset(out), "data.json says \"train_tokens\"");
  }
  // One count edited alone: the field that is wrong is named, not the split it breaks.
  for (const char* key : {"train_tokens", "val_tokens"}) {
    auto j = good;
    j[key] = j[key].get<int64_t>() + 7;
    write_bytes(out / "data.json", j.dump(2));
    const std::string named = std::string("says \"") + key + "\": ";
    EXPECT_ERROR_WITH(open_dataset(out), named.c_str(), "data.json was edited");
  }
  write_bytes(out / "data.json", original);
  EXPECT_NO_THROW(open_dataset(out));
  // The same checks from text in memory.
  EXPECT_EQ(parse_dataset_info(original, "memory/data.json").train_tokens, info.train_tokens);
  EXPECT_ERROR_WITH(parse_dataset_info("{\"format\": \"tessera-dataset\"}", "memory/data.json"), "memory/data.json",
                    "no \"vocab_size\"");
  EXPECT_ERROR_WITH(parse_dataset_info("[]", "memory/data.json"), "not a tessera dataset description");
  // A value nested this deep would overflow the stack when an error message prints it.
  EXPECT_ERROR_WITH(parse_dataset_info("{\"format\": \"tessera-dataset\", \"vocab_size\": " + std::string(200000, '[') +
                                           std::string(200000, ']') + "}",
                                       "memory/data.json"),
                    "memory/data.json", "nests JSON more than 64 levels");
}

TEST_F(PreparedDataset, BadOptionsAndEmptyCorpusAreClearErrors) {
  PrepareOptions o = options();
  o.val_fraction = 0.7;
  EXPECT_ERROR_WITH(prepare_dataset(o), "--val-fraction 0.7");
  write_bytes(dir_ / "empty.txt", "");
  o = options();
  o.input = (dir_ / "empty.txt").string();
  EXPECT_ERROR_WITH(prepare_dataset(o), "empty.txt", "is empty");
  o = options();
  o.input = "kjv";
  o.bible_program = "tessera-no-such-bible-program";
  EXPECT_ERROR_WITH(prepare_dataset(o), "bible-kjv");
  o = options();
  o.tokenizer = dir_ / "absent.model";
  EXPECT_ERROR_WITH(prepare_dataset(o), "absent.model");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/data.json"));
}

TEST_F(PreparedDataset, AnExistingDatasetIsReplacedOnlyWhenAskedTo) {
  prepare_dataset(options());
  const std::string train = read_bytes(dir_ / "out/train.bin");
  PrepareOptions o = options(0.2);
  EXPECT_ERROR_WITH(prepare_dataset(o), "--out", "already holds a dataset", "data.json", "--force");
  EXPECT_EQ(read_bytes(dir_ / "out/train.bin"), train);  // untouched
  o.overwrite = true;
  prepare_dataset(o);
  EXPECT_NE(read_bytes(dir_ / "out/train.bin"), train);
  // An empty folder is fine; a file where the folder should be is not.
  std::filesystem::create_directories(dir_ / "empty_folder");
  o = options();
  o.out = dir_ / "empty_folder";
  EXPECT_NO_THROW(prepare_dataset(o));
  write_bytes(dir_ / "a_file", "x");
  o.out = dir_ / "a_file";
  o.overwrite = true;
  EXPECT_ERROR_WITH(prepare_dataset(o), "a_file exists and is not a folder");
}

TEST(TrainValSplit, ValidationIsSpreadEvenlyAndNothingIsLost) {
  std::vector<int32_t> tokens(100000);
  std::iota(tokens.begin(), tokens.end(), 0);
  const TrainValSplit s = split_train_val(tokens, 0.05);
  EXPECT_EQ(s.val.size(), 5000u);
  EXPECT_EQ(s.train.size(), 95000u);
  EXPECT_EQ(s.val_pieces, 1);  // 5000 / 4096
  const TrainValSplit big = split_train_val(tokens, 0.5);
  EXPECT_EQ(big.val_pieces, 12);  // 50000 / 4096
  // Every token lands once, each part keeps the stream's order, and validation pieces reach from
  // the first stride to the last.
  for (const TrainValSplit* split : {&s, &big}) {
    std::vector<int32_t> all = split->train;
    all.insert(all.end(), split->val.begin(), split->val.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, tokens);
    EXPECT_TRUE(std::is_sorted(split->train.begin(), split->train.end()));
    EXPECT_TRUE(std::is_sorted(split->val.begin(), split->val.end()));
  }
  EXPECT_LT(big.val.front(), 100000 / 12);
  EXPECT_GT(big.val.back(), 100000 - 100000 / 12 - 1);
  EXPECT_TRUE(split_train_val(tokens, 0.0).val.empty());
  EXPECT_ERROR_WITH(split_train_val(tokens, 0.6), "val fraction 0.6");
}

TEST(ModelVocab, MustHoldEveryDataId) {
  EXPECT_NO_THROW(check_model_vocab(4096, 4096, "data.json"));
  EXPECT_NO_THROW(check_model_vocab(4160, 4096, "data.json"));  // padded
  EXPECT_ERROR_WITH(check_model_vocab(4000, 4096, "out/data.json"), "model.vocab_size = 4000", "4096", "out/data.json");
}

TEST(Checksum, IsStableAndSensitive) {
  EXPECT_EQ(checksum(""), "fnv1a64:cbf29ce484222325");
  EXPECT_EQ(checksum("abc"), checksum("abc"));
  EXPECT_NE(checksum("abc"), checksum("abd"));
}

}  // namespace
}  // namespace tessera::data
