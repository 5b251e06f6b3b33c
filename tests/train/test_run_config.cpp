#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "config/tensor_parallel_shape.h"
#include "train/memory_check.h"
#include "train/config_changes.h"
#include "train/run_config.h"
#include "train/trainer.h"

using namespace tessera;
using namespace tessera::train;

namespace {
std::string error_of(const std::string& text, std::vector<std::pair<std::string, std::string>> overrides = {}) {
  try {
    toml::table t = toml::parse(text);
    apply_overrides(t, overrides);
    read_run_config(t);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunConfig, OverridesReplaceAndAddKeys) {
  toml::table t = toml::parse("[train]\nsteps = 10\n");
  apply_overrides(t, {{"train.steps", "25"}, {"model.n_layer", "2"}, {"data.dir", "some/folder"},
                      {"optim.lr", "3e-4"}, {"model.bias", "false"}});
  RunConfig c = read_run_config(t);
  EXPECT_EQ(c.train.steps, 25);
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.data.dir, "some/folder");
  EXPECT_FLOAT_EQ(c.optim.lr, 3e-4f);
  EXPECT_FALSE(c.model.bias);
  EXPECT_TRUE(c.vocab_from_data);
}

TEST(RunConfig, ResolvedConfigRoundTrips) {
  toml::table t = toml::parse("[model]\nvocab_size = 500\nn_layer = 3\n[optim]\nlr = 1e-3\n[train]\nsample_prompt = \"In the\"\n");
  RunConfig c = read_run_config(t);
  std::string text = to_toml(c);
  EXPECT_NE(text.find("lr = 0.001"), std::string::npos) << text;
  RunConfig back = read_run_config(toml::parse(text));
  EXPECT_EQ(to_toml(back), text);
  EXPECT_FALSE(back.vocab_from_data);
}

// model.activation is saved resolved (the architecture's when unset), round-trips, and a config
// saved before the key existed is its architecture's, not a change; another activation is one.
TEST(RunConfig, TheActivationIsSavedResolvedAndComparedWithOlderConfigs) {
  for (const char* arch : {"gpt2", "llama"}) {
    const RunConfig c = read_run_config(toml::parse(fmt::format("[model]\narch = \"{}\"\n", arch)));
    const std::string text = to_toml(c);
    const std::string own = std::string(arch) == "gpt2" ? "gelu" : "swiglu";
    EXPECT_NE(text.find("activation = '" + own + "'"), std::string::npos) << text;
    const RunConfig back = read_run_config(toml::parse(text));
    EXPECT_EQ(back.model.mlp_activation(), c.model.mlp_activation());
    std::string older = text;
    older.erase(older.find("activation = '" + own + "'\n"), ("activation = '" + own + "'\n").size());
    ASSERT_EQ(older.find("activation ="), std::string::npos) << older;
    EXPECT_TRUE(config_changes(older, text).empty()) << describe_changes(config_changes(older, text));
    RunConfig relu2 = c;
    relu2.model.activation = config::Activation::Relu2;
    EXPECT_EQ(describe_changes(config_changes(older, to_toml(relu2))),
              fmt::format("model.activation \"{}\" -> \"relu2\"", own));
  }
  EXPECT_NE(error_of("[model]\nactivation = \"gelu_new\"\n").find("model.activation = 'gelu_new' is not known"),
            std::string::npos);
}

TEST(RunConfig, ErrorsNameTheKeyAndTheFix) {
  EXPECT_NE(error_of("[train]\nstep = 3\n").find("unknown key 'train.step'; did you mean 'train.steps'?"), std::string::npos);
  EXPECT_NE(error_of("[trian]\nsteps = 3\n").find("unknown key 'trian'; did you mean 'train'?"), std::string::npos);
  // Nothing close: every section named once.
  std::string unknown = error_of("[bogus]\nx = 1\n");
  EXPECT_NE(unknown.find("unknown section [bogus]; the sections are: model, data, train,"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.find("model, model"), std::string::npos) << unknown;
  unknown = error_of("verbosity = 3\n[train]\nsteps = 3\n");
  EXPECT_NE(unknown.find("key 'verbosity' stands outside any section; every key belongs to one of: model,"),
            std::string::npos) << unknown;
  EXPECT_NE(error_of("[train]\nsteps = \"ten\"\n").find("'train.steps' must be an integer"), std::string::npos);
  std::string e = error_of("[train]\nbatch_size = 10\nmicro_batch_size = 4\n");
  EXPECT_NE(e.find("train.batch_size (10) must be a multiple of train.micro_batch_size × parallel.dp"), std::string::npos) << e;
  EXPECT_NE(e.find("set train.micro_batch_size = 2, which keeps the global batch of 10 (2 × dp 1 × 5 microbatches), "
                   "or set train.batch_size = 12"), std::string::npos) << e;
  // The README's MoE command: dp 4 with microbatches of 16 in a batch of 16; a microbatch of 4 fits.
  e = error_of("[train]\nbatch_size = 16\nmicro_batch_size = 16\n[parallel]\ndp = 4\n");
  EXPECT_NE(e.find("set train.micro_batch_size = 4, which keeps the global batch of 16"), std::string::npos) << e;
  // A batch dp does not divide: only a larger batch fits.
  e = error_of("[train]\nbatch_size = 6\nmicro_batch_size = 1\n[parallel]\ndp = 4\n");
  EXPECT_EQ(e.find("micro_batch_size ="), std::string::npos) << e;
  EXPECT_NE(e.find("set train.batch_size = 8"), std::string::npos) << e;
  // Factors each in range whose product overflows an int (UBSan in the fuzz build; the input is in
  // tests/fuzz/corpus/fuzz_run_config/regression_batch_product_overflow.toml).
  e = error_of("[train]\nbatch_size = 16777216\nmicro_batch_size = 16777216\n[parallel]\ndp = 1048576\n");
  EXPECT_NE(e.find("(16777216 × 1048576 = 17592186044416)"), std::string::npos) << e;
  EXPECT_NE(error_of("", {{"optim.lr", "-1"}}).find("optim.lr = -1 must be in (0, 10)"), std::string::npos);
  EXPECT_NE(error_of("[log]\nprogress = \"fancy\"\n").find("log.progress"), std::string::npos);
  EXPECT_NE(error_of("", {{"parallel.zero_stage", "4"}}).find("'parallel.zero_stage' = 4 is out of range"), std::string::npos);
}

// The README's config reference lists exactly the keys of the schema.
TEST(RunConfig, ReadmeDocumentsEveryKey) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr);
  std::ifstream in(std::string(source) + "/README.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const size_t begin = readme.find("## Config reference");
  ASSERT_NE(begin, std::string::npos) << "README.md needs a '## Config reference' section";
  const size_t end = readme.find("\n## ", begin + 1);
  const std::string section = readme.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  // Documented keys are table rows starting with | `section.key` |.
  std::set<std::string> documented;
  std::regex row(R"(\|\s*`([a-z_0-9]+\.[a-z_0-9]+)`\s*\|)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row); it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1].str());
  }
  std::set<std::string> schema;
  toml::table resolved = toml::parse(to_toml(RunConfig{}));
  for (const auto& [section_name, table] : resolved) {
    for (const auto& [key, value] : *table.as_table()) schema.insert(std::string(section_name.str()) + "." + std::string(key.str()));
  }
  for (const auto& k : schema) EXPECT_TRUE(documented.count(k)) << "README config reference lacks " << k;
  for (const auto& k : documented) EXPECT_TRUE(schema.count(k)) << "README documents " << k << ", which the config does not have";
}

TEST(RunConfig, ParallelKeysAreReadAndChecked) {
  toml::table t = toml::parse("[parallel]\ndp = 2\nzero_stage = 3\nbucket_mb = 0.5\ntimeout_seconds = 30\n[train]\nbatch_size = 32\n");
  RunConfig c = read_run_config(t);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.zero_stage, 3);
  EXPECT_FLOAT_EQ(c.parallel.bucket_mb, 0.5f);
  EXPECT_FLOAT_EQ(c.parallel.timeout_seconds, 30.0f);
  EXPECT_EQ(c.accumulation_steps(), 1);
  EXPECT_NE(to_toml(c).find("bucket_mb = 0.5"), std::string::npos);
  EXPECT_NE(error_of("", {{"parallel.bucket_mb", "0"}}).find("parallel.bucket_mb = 0 must hold at least one f32 element"),
            std::string::npos);
  EXPECT_NE(error_of("", {{"parallel.timeout_seconds", "-1"}}).find("parallel.timeout_seconds must be positive"),
            std::string::npos);
  EXPECT_NE(error_of("", {{"parallel.bucket_mbb", "1"}}).find("did you mean 'parallel.bucket_mb'?"), std::string::npos);
}

TEST(RunConfig, OverridesTooLargeForAnIntegerAreOutOfRangeNotStrings) {
  // TOML cannot hold these, so the override reads them as text; the reader still says what they are.
  std::string e = error_of("", {{"model.n_layer", "99999999999999999999"}});
  EXPECT_NE(e.find("'model.n_layer' = 99999999999999999999 is out of range; it must be in [-2147483648, 2147483647]"),
            std::string::npos)
      << e;
  e = error_of("", {{"train.steps", "-99999999999999999999"}});
  EXPECT_NE(e.find("'train.steps' = -99999999999999999999 is out of range"), std::string::npos) << e;
  e = error_of("", {{"optim.lr", "1e999"}});
  EXPECT_NE(e.find("'optim.lr' = 1e999 is out of range"), std::string::npos) << e;
  e = error_of("", {{"model.rope_theta", "nan"}});
  EXPECT_NE(e.find("'model.rope_theta' = nan must be a finite number"), std::string::npos) << e;
  // Text that is not a number stays text, for keys that take text.
  EXPECT_EQ(error_of("", {{"data.dir", "123456789012345678901234"}}), "");
}

TEST(RunConfig, OptimizerKeysAreReadAndRefusedWhereIgnored) {
  toml::table t = toml::parse(
      "[optim]\nname = \"sgd\"\nmomentum = 0.9\nnesterov = true\ndecoupled_weight_decay = true\n");
  RunConfig c = read_run_config(t);
  EXPECT_EQ(c.optim.kind, optim::OptimizerKind::Sgd);
  EXPECT_FLOAT_EQ(c.optim.momentum, 0.9f);
  EXPECT_TRUE(c.optim.nesterov);
  // The resolved config, every key written, reads back.
  RunConfig again = read_run_config(toml::parse(to_toml(c)));
  EXPECT_TRUE(again.optim.decoupled_weight_decay);
  EXPECT_EQ(read_run_config(toml::parse("[optim]\nname = \"adam8bit\"\nblock_size = 256\nquantization = \"linear\"\n"))
                .optim.block_size,
            256);

  const std::string unknown = error_of("[optim]\nname = \"adagrad\"\n");
  EXPECT_NE(unknown.find("\"adamw\", \"sgd\", \"adafactor\", \"adam8bit\", \"lamb\", \"lars\" or \"onebit_adam\""),
            std::string::npos)
      << unknown;
  const std::string ignored = error_of("[optim]\nmomentum = 0.9\n");
  EXPECT_NE(ignored.find("optim.momentum is read by optim.name = \"sgd\" or \"lars\" only (it is \"adamw\")"),
            std::string::npos)
      << ignored;
  EXPECT_NE(error_of("[optim]\nname = \"sgd\"\nbeta2 = 0.99\n").find("optim.beta2 is read by"), std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"lamb\"\nblock_size = 64\n").find("\"adam8bit\" only"), std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"adafactor\"\nbeta1 = 0.8\n").find("optim.first_moment = true"),
            std::string::npos);
  EXPECT_EQ(error_of("[optim]\nname = \"adafactor\"\nfirst_moment = true\nbeta1 = 0.8\n"), "");
  EXPECT_NE(error_of("[optim]\nname = \"sgd\"\nnesterov = true\n").find("needs momentum"), std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"adam8bit\"\nquantization = \"log\"\n").find("\"dynamic\" or \"linear\""),
            std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"adafactor\"\ndecay_rate = 1.5\n").find("optim.decay_rate"), std::string::npos);
  // The rate of what LAMB's and LARS' trust ratio leaves out: read, refused elsewhere, ranged.
  EXPECT_FLOAT_EQ(
      read_run_config(toml::parse("[optim]\nname = \"lamb\"\nunadapted_lr_scale = 0.1\n")).optim.unadapted_lr_scale,
      0.1f);
  EXPECT_EQ(error_of("[optim]\nname = \"lars\"\nunadapted_lr_scale = 0\n"), "");
  EXPECT_NE(error_of("[optim]\nunadapted_lr_scale = 0.1\n").find("optim.unadapted_lr_scale is read by optim.name = "
                                                                   "\"lamb\" or \"lars\" only"),
            std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"lamb\"\nunadapted_lr_scale = -1\n").find("must be in [0, 1000]"),
            std::string::npos);
  // 1-bit Adam: its warm-up key, and the layouts it cannot run in, each with the reason.
  EXPECT_EQ(read_run_config(toml::parse("[optim]\nname = \"onebit_adam\"\nfreeze_step = 40\n")).optim.freeze_step, 40);
  EXPECT_NE(error_of("[optim]\nfreeze_step = 40\n").find("optim.freeze_step is read by optim.name = \"onebit_adam\" only"),
            std::string::npos);
  EXPECT_NE(error_of("[optim]\nname = \"onebit_adam\"\nfreeze_step = -1\n").find("optim.freeze_step"), std::string::npos);
  const std::string onebit = "[optim]\nname = \"onebit_adam\"\n[train]\nbatch_size = 32\n[parallel]\ndp = 2\n";
  EXPECT_EQ(error_of(onebit), "");
  EXPECT_NE(error_of(onebit + "zero_stage = 2\n").find("ZeRO would shard it"), std::string::npos);
  EXPECT_NE(error_of(onebit + "compression = \"onebit\"\n").find("compresses its momentum itself"), std::string::npos);
  EXPECT_NE(error_of(onebit + "pp = 2\nschedule = \"2bw\"\n").find("a 2BW program holds several"), std::string::npos);
  // fp16: each rank's local gradient is checked for overflow before the exchange.
  EXPECT_EQ(error_of(onebit + "[precision]\ncompute = \"fp16\"\n"), "");
}

// The start line's memory estimate (which refuses a run that cannot fit) counts what one
// tensor-parallel rank holds: its parameter blocks, and activations split over tp (and over the
// sequence with sp), so a model that fits only when split is not refused.
TEST(RunConfig, TheMemoryEstimateCountsOneTensorParallelRank) {
  const std::string text =
      "[model]\nn_layer = 4\nn_head = 8\nn_kv_head = 4\nn_embd = 256\nvocab_size = 1000\nseq_len = 64\n"
      "[train]\nbatch_size = 8\nmicro_batch_size = 8\n";
  toml::table t = toml::parse(text);
  const RunConfig one = read_run_config(t);
  apply_overrides(t, {{"parallel.tp", "2"}});
  const RunConfig two = read_run_config(t);
  apply_overrides(t, {{"parallel.sp", "true"}});
  const RunConfig two_sp = read_run_config(t);
  const MemoryEstimate a = estimate_run_memory(one), b = estimate_run_memory(two), s = estimate_run_memory(two_sp);
  EXPECT_EQ(a.params, 4.0 * static_cast<double>(one.model.parameter_count()));
  EXPECT_EQ(b.params, 4.0 * static_cast<double>(config::tensor_parallel_rank_parameters(two.model, 2)));
  EXPECT_LT(b.params, 0.6 * a.params);
  EXPECT_LT(b.activations, a.activations);
  EXPECT_LT(s.activations, b.activations);
}

TEST(RunConfig, PrecisionKeysAreReadAndRefusedWhereIgnored) {
  RunConfig c = read_run_config(toml::parse("[precision]\ncompute = \"bf16\"\n"));
  EXPECT_EQ(c.precision_options().compute, DType::BF16);
  EXPECT_FALSE(c.precision_options().loss_scaling.enabled);  // bf16 has fp32's range

  c = read_run_config(toml::parse("[precision]\ncompute = \"fp16\"\ninit_scale = 1024\ngrowth_interval = 50\n"
                                  "backoff_factor = 0.25\n"));
  config::PrecisionOptions p = c.precision_options();
  EXPECT_EQ(p.compute, DType::F16);
  EXPECT_TRUE(p.loss_scaling.enabled && p.loss_scaling.dynamic);
  EXPECT_EQ(p.loss_scaling.init_scale, 1024.0);
  EXPECT_EQ(p.loss_scaling.growth_interval, 50);
  EXPECT_EQ(p.loss_scaling.backoff_factor, 0.25);
  EXPECT_EQ(to_toml(read_run_config(toml::parse(to_toml(c)))), to_toml(c));

  // A fixed scale, as a TOML number or from the command line.
  c = read_run_config(toml::parse("[precision]\ncompute = \"fp16\"\nloss_scale = 128\n"));
  EXPECT_FALSE(c.precision_options().loss_scaling.dynamic);
  EXPECT_EQ(c.precision_options().loss_scaling.init_scale, 128.0);
  EXPECT_EQ(to_toml(read_run_config(toml::parse(to_toml(c)))), to_toml(c));
  toml::table t = toml::parse("");
  apply_overrides(t, {{"precision.compute", "fp16"}, {"precision.loss_scale", "4096"}});
  EXPECT_EQ(read_run_config(t).precision_options().loss_scaling.init_scale, 4096.0);

  c = read_run_config(toml::parse("[parallel]\ndp = 2\ngrad_dtype = \"bf16\"\n[train]\nbatch_size = 32\n"));
  EXPECT_EQ(c.precision_options().grad_dtype, DType::BF16);

  EXPECT_NE(error_of("[precision]\ncompute = \"fp8\"\n").find("precision.compute = 'fp8' is not known; use \"fp32\", "
                                                                "\"bf16\" or \"fp16\""),
            std::string::npos);
  EXPECT_NE(error_of("[precision]\ncompute = \"bf16\"\nloss_scale = 1024\n")
                .find("precision.loss_scale is read by precision.compute = \"fp16\" only"),
            std::string::npos);
  EXPECT_NE(error_of("[precision]\ngrowth_interval = 10\n").find("precision.growth_interval is read by"),
            std::string::npos);
  EXPECT_NE(error_of("[precision]\ncompute = \"fp16\"\nloss_scale = \"huge\"\n")
                .find("precision.loss_scale = 'huge' must be \"dynamic\" or a fixed scale"),
            std::string::npos);
  EXPECT_NE(error_of("[precision]\ncompute = \"fp16\"\nloss_scale = 0.5\n").find("a fixed scale of at least 1"),
            std::string::npos);
  EXPECT_NE(error_of("[precision]\ncompute = \"fp16\"\nbackoff_factor = 1.5\n").find("precision.backoff_factor"),
            std::string::npos);
  EXPECT_NE(error_of("[parallel]\ngrad_dtype = \"bf16\"\n").find("parallel.dp = 1 has none"), std::string::npos);
  EXPECT_NE(error_of("[parallel]\ndp = 2\ngrad_dtype = \"bf16\"\ncompression = \"qsgd\"\n[train]\nbatch_size = 32\n")
                .find("a compressor chooses its own messages"),
            std::string::npos);
}

// The start line's bound charges gradient buckets no larger than the rank's gradients: a small
// model is not told it needs three full 25 MiB buckets.
TEST(RunConfig, TheMemoryEstimateChargesNoBucketLargerThanTheGradients) {
  const RunConfig tiny = read_run_config(toml::parse(
      "[model]\nn_layer = 2\nn_head = 2\nn_embd = 64\nvocab_size = 256\nseq_len = 32\n"
      "[train]\nbatch_size = 4\nmicro_batch_size = 4\n"));
  const double gradient_bytes = 4.0 * static_cast<double>(tiny.model.parameter_count());
  const double bucket_bytes = static_cast<double>(tiny.parallel.bucket_mb) * 1048576.0;
  ASSERT_LT(gradient_bytes, bucket_bytes);
  const MemoryEstimate small = estimate_run_memory(tiny);
  EXPECT_GE(small.buffers, 3.0 * gradient_bytes);
  EXPECT_LT(small.buffers, bucket_bytes);
  const RunConfig large = read_run_config(toml::parse(
      "[model]\nn_layer = 12\nn_head = 12\nn_embd = 768\nvocab_size = 50257\nseq_len = 64\n"
      "[train]\nbatch_size = 1\nmicro_batch_size = 1\n"));
  EXPECT_GE(estimate_run_memory(large).buffers, 3.0 * bucket_bytes);
}

// The start line names each part in a unit that shows it: a small model's are not "0.00 GiB".
TEST(RunConfig, TheMemoryEstimateReadsInMiBBelowAGiB) {
  EXPECT_EQ(readable_bytes(14.5 * 1048576.0), "14.5 MiB");
  EXPECT_EQ(readable_bytes(1023.0 * 1048576.0), "1023.0 MiB");
  EXPECT_EQ(readable_bytes(3.0 * 1073741824.0), "3.00 GiB");
  const RunConfig tiny = read_run_config(toml::parse(
      "[model]\nn_layer = 2\nn_head = 2\nn_embd = 64\nvocab_size = 256\nseq_len = 32\n"
      "[train]\nbatch_size = 4\nmicro_batch_size = 4\n"));
  const MemoryEstimate estimate = estimate_run_memory(tiny);
  const std::string text = estimate.describe();
  EXPECT_EQ(text.find("GiB"), std::string::npos) << text;
  EXPECT_EQ(text.find("parameters " + readable_bytes(estimate.params) + ", "), 0u) << text;
}

// The start line's warnings on the data's size: too few tokens per vocabulary piece, too many epochs.
TEST(RunConfig, DataSizeWarningsNameTheRatioAndTheFix) {
  tessera::train::RunConfig cfg;
  cfg.model.vocab_size = 8192;
  cfg.train.steps = 100;
  auto warnings = tessera::train::data_size_warnings(cfg, 21000, 10.0);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("a vocabulary of 8192 pieces on 21000 training tokens is 2.6 tokens per piece"),
            std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("--vocab-size (about 256)"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("100 steps read the training tokens 10 times (epochs)"), std::string::npos) << warnings[1];
  cfg.model.vocab_size = 4096;
  EXPECT_TRUE(tessera::train::data_size_warnings(cfg, 988181, 2.0).empty());
  const auto one = tessera::train::data_size_warnings(cfg, 988181, 4.5);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NE(one[0].find("4.5 times"), std::string::npos) << one[0];
  EXPECT_NE(tessera::train::data_size_warnings(cfg, 150000, 1.0).at(0).find("about 2048"), std::string::npos);
}
