#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/model_config.h"
#include "config/model_keys.h"

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

// model.activation: unset is the architecture's own; any architecture takes any of the four, and
// the MLP's width and parameters follow the activation (gated or not), not the architecture.
TEST(ModelConfig, ActivationDefaultsToTheArchitecturesAndSetsTheMlpShape) {
  const ModelConfig gpt2 = parse("[model]\nn_embd = 96\nn_head = 4\n");
  EXPECT_FALSE(gpt2.activation.has_value());
  EXPECT_EQ(gpt2.mlp_activation(), Activation::Gelu);
  const ModelConfig llama = parse("[model]\narch = \"llama\"\nn_embd = 96\nn_head = 4\n");
  EXPECT_EQ(llama.mlp_activation(), Activation::Swiglu);
  EXPECT_EQ(llama.ffn(), 256);  // 8·96/3 = 256

  const ModelConfig relu2 = parse("[model]\nn_embd = 96\nn_head = 4\nactivation = \"relu2\"\n");
  EXPECT_EQ(relu2.mlp_activation(), Activation::Relu2);
  EXPECT_EQ(relu2.ffn(), gpt2.ffn());
  EXPECT_EQ(relu2.parameter_count(), gpt2.parameter_count());
  const ModelConfig gated = parse("[model]\nn_embd = 96\nn_head = 4\nactivation = \"swiglu\"\n");
  EXPECT_EQ(gated.ffn(), 256);
  const int64_t C = 96, F = 256;
  EXPECT_EQ(gated.mlp_parameter_count(), 2 * C * F + 2 * F + F * C + C);  // gate, up, down, biases
  EXPECT_EQ(gated.parameter_count() - gpt2.parameter_count(),
            4 * (gated.mlp_parameter_count() - gpt2.mlp_parameter_count()));
  const ModelConfig llama_relu = parse("[model]\narch = \"llama\"\nn_embd = 96\nn_head = 4\nactivation = \"relu\"\n");
  EXPECT_EQ(llama_relu.ffn(), 4 * 96);
  EXPECT_EQ(llama_relu.mlp_parameter_count(), 2 * C * 4 * C);  // fc and proj, no biases

  for (Activation a : {Activation::Gelu, Activation::Relu, Activation::Relu2, Activation::Swiglu}) {
    EXPECT_EQ(parse_activation(activation_name(a), "model.activation"), a);
  }
}

TEST(ModelConfig, AnUnknownActivationIsRefusedListingTheNames) {
  const std::string e = error_of("[model]\nactivation = \"silu\"\n");
  EXPECT_NE(e.find("model.activation = 'silu' is not known; use one of \"gelu\", \"relu\", \"relu2\", \"swiglu\""),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("[model]\nactivation = 2\n").find("model.activation"), std::string::npos);
}

// Grouped-query attention: Llama 2 70B and Llama 3 8B from their config files have the published
// parameter counts (k and v projections of n_kv_head heads only).
TEST(ModelConfig, GroupedQueryAttentionCountsThePublishedParameters) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  const auto count = [&](const std::string& file) {
    const toml::table t = parse_toml_file(std::string(source) + "/configs/models/" + file);
    return read_model_config(TableReader(*t["model"].as_table(), "model"));
  };
  const ModelConfig llama2 = count("llama2-70b.toml"), llama3 = count("llama3-8b.toml");
  EXPECT_EQ(llama2.kv_heads(), 8);
  EXPECT_EQ(llama2.qkv_dim(), 8192 + 2 * 1024);
  EXPECT_EQ(llama2.parameter_count(), 68976648192);
  EXPECT_EQ(llama3.parameter_count(), 8030261248);
  // Without the key: as many key/value heads as heads.
  EXPECT_EQ(parse("[model]\nn_head = 4\n").kv_heads(), 4);
}

TEST(ModelConfig, KeyValueHeadsThatDoNotDivideTheHeadsAreRefusedWithTheDivisors) {
  std::string e = error_of("[model]\nn_embd = 96\nn_head = 6\nn_kv_head = 4\n");
  EXPECT_NE(e.find("model.n_kv_head = 4 must divide model.n_head = 6"), std::string::npos) << e;
  EXPECT_NE(e.find("pick n_kv_head among 1, 2, 3, 6"), std::string::npos) << e;
  e = error_of("[model]\nn_head = 4\nn_kv_head = 8\n");
  EXPECT_NE(e.find("'model.n_kv_head' = 8 is out of range"), std::string::npos) << e;
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

TEST(ModelConfig, AnIntegerTooLargeForItsTypeIsOutOfRangeWithTheLimits) {
  std::string e = error_of("[model]\nn_layer = 9999999999\n");
  EXPECT_NE(e.find("'model.n_layer' = 9999999999 is out of range; it must be in [-2147483648, 2147483647]"),
            std::string::npos)
      << e;
  // Too large even for TOML's 64 bits: a command-line override keeps such digits as a string.
  e = error_of("[model]\nn_layer = \"99999999999999999999\"\n");
  EXPECT_NE(e.find("'model.n_layer' = 99999999999999999999 is out of range"), std::string::npos) << e;
  EXPECT_EQ(e.find("got a string"), std::string::npos) << e;
  // A float key: a number beyond float's range, and one beyond any double.
  e = error_of("[model]\nrope_theta = 1e300\n");
  EXPECT_NE(e.find("'model.rope_theta' = 1e+300 is out of range"), std::string::npos) << e;
  e = error_of("[model]\nrope_theta = \"1e999\"\n");
  EXPECT_NE(e.find("'model.rope_theta' = 1e999 is out of range"), std::string::npos) << e;
}

TEST(ModelConfig, NanAndInfinityAreRefusedNamingTheKey) {
  for (const char* value : {"nan", "inf", "-inf", "+nan"}) {
    const std::string e = error_of(std::string("[model]\nrope_theta = ") + value + "\n");
    EXPECT_NE(e.find("'model.rope_theta' = "), std::string::npos) << e;
    EXPECT_NE(e.find("must be a finite number"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("[model]\nnorm_eps = nan\n").find("'model.norm_eps'"), std::string::npos);
  EXPECT_NE(error_of("[model]\ndropout = inf\n").find("'model.dropout'"), std::string::npos);
}

TEST(ModelConfig, ValidateRefusesANonFiniteRopeThetaSetInCode) {
  ModelConfig m;
  m.arch = Architecture::Llama;
  m.rope_theta = std::numeric_limits<float>::quiet_NaN();
  try {
    m.validate();
    FAIL() << "rope_theta = nan was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.rope_theta = nan"), std::string::npos) << e.what();
  }
  m.rope_theta = 0.0f;
  EXPECT_THROW(m.validate(), Error);
  m.rope_theta = 10000.0f;
  m.norm_eps = std::numeric_limits<float>::infinity();
  EXPECT_THROW(m.validate(), Error);
}

TEST(ParseTomlFile, AFolderOrAnythingButARegularFileIsRefused) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "tessera_toml_folder";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "default.toml") << "[model]\nn_layer = 2\n";
  try {
    parse_toml_file(dir.string());
    FAIL() << "a folder was read as a config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + dir.string() + "' is a folder"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find((dir / "default.toml").string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(describe_folder_given_as_toml(dir.string(), "--config"),
            "'" + dir.string() + "' is a folder; --config takes a TOML file such as " + (dir / "default.toml").string());
  try {
    parse_toml_file("/dev/null");
    FAIL() << "/dev/null was read as a config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  try {
    parse_toml_file((dir / "absent.toml").string());
    FAIL() << "a missing file was read as a config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(ParseTomlFile, SyntaxErrorsShowTheLine) {
  const std::filesystem::path file = std::filesystem::path(::testing::TempDir()) / "tessera_bad.toml";
  std::ofstream(file) << "[model]\nn_layer = 99999999999999999999\n";
  try {
    parse_toml_file(file.string());
    FAIL() << "an integer beyond 64 bits was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("line 2"), std::string::npos) << m;
    EXPECT_NE(m.find("n_layer = 99999999999999999999"), std::string::npos) << m;
  }
  std::filesystem::remove(file);
}

// The [model] section is read from its keys' declarations (config/model_keys.h): a model with every
// key away from its default, written key by key as the resolved config writes them, reads back
// whole.
TEST(ModelKeys, TheReaderReadsEveryDeclaredKey) {
  ModelConfig m;
  m.arch = Architecture::Llama;
  m.bias = false;
  m.n_layer = 6;
  m.n_head = 8;
  m.n_kv_head = 2;
  m.n_embd = 64;
  m.vocab_size = 300;
  m.seq_len = 64;
  m.ffn_hidden = 128;
  m.activation = Activation::Relu2;
  m.tied_embeddings = false;
  m.dropout = 0.125f;
  m.norm_eps = 1e-6f;
  m.rope_theta = 500000.0f;
  m.moe_experts = 4;
  m.moe_top_k = 2;
  m.moe_capacity_factor = 1.5f;
  m.moe_every = 2;
  m.moe_aux_loss_coef = 0.02f;
  m.moe_z_loss_coef = 0.002f;
  toml::table section;
  for (const ModelKey& key : model_keys()) {
    EXPECT_NE(model_key_value(key, m), model_key_value(key, ModelConfig{})) << key.key << " is left at its default";
    std::visit([&](const auto& value) { section.insert(key.name(), value); }, model_key_value(key, m));
  }
  const ModelConfig read = read_model_config(TableReader(section, "model"));
  for (const ModelKey& key : model_keys()) {
    EXPECT_EQ(model_key_value(key, read), model_key_value(key, m)) << key.key;
  }
}

// validate() holds every key to its declared range, naming the key: a value just outside it (the
// bound itself where it is open) is refused. The MoE keys are held to theirs when the model has
// experts, which read them.
TEST(ModelKeys, DeclaredRangesAreChecked) {
  EXPECT_NO_THROW(ModelConfig{}.validate());
  const auto outside = [](const Range& range, bool integral) {
    std::vector<double> values;
    const double step_down = integral ? 1.0 : std::max(1.0, std::abs(range.low));
    const double step_up = integral ? 1.0 : std::max(1.0, std::abs(range.high));
    for (const double v : {range.low_open ? range.low : range.low - step_down,
                           range.high_open ? range.high : range.high + step_up}) {
      if (std::abs(v) < kFinite) values.push_back(v);
    }
    return values;
  };
  const auto refusal = [](const ModelConfig& m) {
    try {
      m.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  int ranged = 0;
  for (const ModelKey& key : model_keys()) {
    if (!key.range) continue;
    ++ranged;
    ModelConfig base;
    if (key.read_by != nullptr) base.moe_experts = 2;
    ASSERT_TRUE(key.read_by == nullptr || key.read_by(base)) << key.key;
    const auto check = [&](auto member, bool integral) {
      for (const double v : outside(*key.range, integral)) {
        ModelConfig m = base;
        m.*member = static_cast<std::remove_reference_t<decltype(m.*member)>>(v);
        const std::string error = refusal(m);
        EXPECT_NE(error.find(key.key), std::string::npos) << key.key << " = " << v << ": " << error;
      }
    };
    if (const auto* member = std::get_if<int ModelConfig::*>(&key.field)) check(*member, true);
    if (const auto* member = std::get_if<float ModelConfig::*>(&key.field)) check(*member, false);
  }
  EXPECT_GE(ranged, 14);
}
