#include <gtest/gtest.h>

#include "config/model_config.h"

using namespace tessera;
using namespace tessera::config;

namespace {
ModelConfig parse(std::string_view text) {
  toml::table t = toml::parse(text);
  return read_model_config(TableReader(*t["model"].as_table(), "model"));
}
std::string error_of(std::string_view text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ModelConfig, ReadsKeysAndDefaults) {
  ModelConfig m = parse("[model]\nn_layer = 12\nn_head = 12\nn_embd = 768\nvocab_size = 50257\nseq_len = 1024\n");
  EXPECT_EQ(m.n_layer, 12);
  EXPECT_EQ(m.ffn(), 3072);
  EXPECT_TRUE(m.tied_embeddings);
  // GPT-2 small: 124,439,808 parameters with tied embeddings and T = 1024.
  EXPECT_EQ(m.parameter_count(), 124439808);
  EXPECT_EQ(gpt2_124m().parameter_count(), m.parameter_count());
}

TEST(ModelConfig, UnknownKeySuggestsTheClosest) {
  std::string e = error_of("[model]\nn_layers = 2\n");
  EXPECT_NE(e.find("unknown key 'model.n_layers'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'model.n_layer'"), std::string::npos) << e;
}

TEST(ModelConfig, WrongTypeNamesTheKey) {
  std::string e = error_of("[model]\nn_embd = \"big\"\n");
  EXPECT_NE(e.find("'model.n_embd' must be an integer"), std::string::npos) << e;
}

TEST(ModelConfig, IndivisibleHeadsExplainTheFix) {
  std::string e = error_of("[model]\nn_embd = 100\nn_head = 3\n");
  EXPECT_NE(e.find("divisible by model.n_head"), std::string::npos) << e;
}

TEST(ModelConfig, OutOfRangeNamesTheRange) {
  std::string e = error_of("[model]\nn_layer = 0\n");
  EXPECT_NE(e.find("'model.n_layer' = 0 is out of range"), std::string::npos) << e;
}
