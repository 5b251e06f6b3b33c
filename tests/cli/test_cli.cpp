// The command line as a user meets it, each case a fresh `tessera` process: whatever goes wrong
// ends in one "error: ..." line and a non-zero exit code, never an abort; the source place of an
// error only with --debug; commands and numeric options named with what they need.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_runner.h"

namespace fs = std::filesystem;
using tessera::testing::CliResult;
using tessera::testing::run_tessera;

namespace {

fs::path g_root;     // scratch folder of this test binary
fs::path g_dataset;  // a small prepared dataset

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What every failure must look like: a non-zero exit, "error: " lines only, and no sign of an
// exception that escaped (terminate, abort) or of a source location.
void expect_clean_failure(const CliResult& r, const std::string& args) {
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_LT(r.exit_code, 128) << args << " ended on a signal:\n" << r.output;
  EXPECT_FALSE(contains(r.output, "terminate called")) << args << "\n" << r.output;
  EXPECT_FALSE(contains(r.output, ".cpp:")) << args << "\n" << r.output;
  EXPECT_FALSE(contains(r.output, "check '")) << args << "\n" << r.output;
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_cli_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    std::ofstream(g_root / "corpus.txt") << tessera::testing::make_test_corpus(30000);
    g_dataset = g_root / "data";
    const CliResult r = run_tessera("data prepare --input " + (g_root / "corpus.txt").string() + " --out " +
                                    g_dataset.string() + " --vocab-size 300 --val-fraction 0.1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST_F(Cli, NoArgumentsPrintTheUsageAndAHint) {
  const CliResult r = run_tessera("");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "Usage:")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nerror: no command given; try 'tessera train --config configs/default.toml'"))
      << r.output;
}

TEST_F(Cli, AnUnknownCommandIsNamedWithASuggestion) {
  CliResult r = run_tessera("trian --config x.toml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "error: unknown command 'trian'; did you mean 'train'? commands: data, train, sample, export, plan, simulate, "
            "launch, compatibility, config-keys\n");
  r = run_tessera("--debug data prep --input x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: unknown 'tessera data' command 'prep'; did you mean 'prepare'?")) << r.output;
  r = run_tessera("data");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: 'tessera data' needs a command: prepare, info")) << r.output;
  r = run_tessera("plan --devcies 8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: 'tessera plan' has no option --devcies; did you mean --devices? ('tessera "
                                 "plan --help' lists the options)"))
      << r.output;
}

// Unknown options of train exit 2 with the option they most likely meant; --help names the program.
TEST_F(Cli, UnknownTrainOptionsAreUsageErrorsWithASuggestion) {
  const std::pair<std::string, std::string> cases[] = {
      {"train --config x.toml --lr 1e-3", "unknown option '--lr'; did you mean '--optim.lr'?"},
      {"train --confg x.toml", "unknown option '--confg'; did you mean '--config'?"},
      {"train --config x.toml --optim.lrr 1", "unknown option '--optim.lrr'; did you mean '--optim.lr'?"},
      {"train --config x.toml --train.stepz=3", "unknown option '--train.stepz'; did you mean '--train.steps'?"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_tessera(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "error: " + message)) << args << "\n" << r.output;
  }
  for (const std::string command : {"train", "plan", "data prepare", "launch"}) {
    const CliResult help = run_tessera(command + " --help");
    EXPECT_EQ(help.exit_code, 0) << help.output;
    EXPECT_TRUE(contains(help.output, "Usage: tessera " + command + " [OPTIONS]")) << help.output;
  }
}

// Bytes a config or a file holds are quoted into messages escaped: no ESC reaches the terminal,
// no malformed UTF-8 reaches the log; text in other scripts stays as it is.
TEST_F(Cli, UntrustedBytesInMessagesAreEscaped) {
  const fs::path config = g_root / "escapes.toml";
  std::ofstream(config) << "[data]\ndir = \"no/such/\u001b[31mfolder\u00e9\"\n";
  const CliResult r = run_tessera("train --config " + config.string() + " --train.out_dir " + (g_root / "esc").string());
  expect_clean_failure(r, "escapes");
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_TRUE(contains(r.output, "no/such/\\x1B[31mfolder\u00e9")) << r.output;
  const fs::path bad = g_root / "latin1.toml";
  std::ofstream(bad, std::ios::binary) << "[train]\nout_dir = \"caf\xe9\"\nsteps = \"\x1b\"\n";
  const CliResult l = run_tessera("train --config " + bad.string());
  expect_clean_failure(l, "latin1");
  EXPECT_EQ(l.output.find('\x1b'), std::string::npos) << l.output;
  EXPECT_EQ(l.output.find('\xe9'), std::string::npos) << l.output;
}

TEST_F(Cli, ForeignExceptionsEndInOneLineNamingTheFile) {
  // A file where the run folder should go: the standard library's filesystem error.
  std::ofstream(g_root / "a_file") << "x";
  const std::string args = "train --data.dir " + g_dataset.string() + " --train.out_dir " +
                           (g_root / "a_file" / "run").string() +
                           " --model.n_layer 1 --model.n_head 2 --model.n_embd 16 --model.seq_len 16"
                           " --train.batch_size 2 --train.micro_batch_size 2 --train.steps 1 --log.progress plain";
  CliResult r = run_tessera(args);
  expect_clean_failure(r, args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "error: ")) << r.output;
  EXPECT_TRUE(contains(r.output, (g_root / "a_file").string())) << r.output;

  // A checkpoint manifest with the right header but no config: a JSON library exception.
  const fs::path checkpoint = g_root / "checkpoint";
  fs::create_directories(checkpoint);
  std::ofstream(checkpoint / "manifest.json") << R"({"format": "tessera-checkpoint", "version": 1, "files": {}})";
  r = run_tessera("sample --checkpoint " + checkpoint.string());
  expect_clean_failure(r, "sample");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(r.output.starts_with("error: ")) << r.output;
  EXPECT_FALSE(contains(r.output, "[json.exception")) << r.output;

  // A folder where a tokenizer file should be: a stream error before, now refused by name.
  fs::create_directories(g_root / "folder.model");
  r = run_tessera("data prepare --input " + (g_root / "corpus.txt").string() + " --out " + (g_root / "o").string() +
                  " --tokenizer " + (g_root / "folder.model").string());
  expect_clean_failure(r, "data prepare --tokenizer folder");
  EXPECT_TRUE(contains(r.output, "error: tokenizer path " + (g_root / "folder.model").string() + " is a folder"))
      << r.output;
}

TEST_F(Cli, TheSourcePlaceIsPrintedOnlyWithDebug) {
  const std::string bad = "train --model.rope_theta nan";
  CliResult r = run_tessera(bad);
  expect_clean_failure(r, bad);
  EXPECT_EQ(r.output, "error: config: 'model.rope_theta' = nan must be a finite number\n");
  for (const std::string& args : {"--debug " + bad, bad + " --debug"}) {
    r = run_tessera(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_TRUE(contains(r.output, "error: config: 'model.rope_theta' = nan must be a finite number\n  at config/"))
        << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "check '")) << args << "\n" << r.output;
  }
}

TEST_F(Cli, AFolderGivenAsConfigIsRefused) {
  const fs::path configs = g_root / "configs";
  fs::create_directories(configs);
  std::ofstream(configs / "default.toml") << "[train]\nsteps = 1\n";
  const CliResult r = run_tessera("train --config " + configs.string());
  expect_clean_failure(r, "train --config folder");
  EXPECT_EQ(r.output, "error: '" + configs.string() + "' is a folder; --config takes a TOML file such as " +
                          (configs / "default.toml").string() + "\n");
}

TEST_F(Cli, ConfigValuesOutOfRangeNameTheKeyAndTheLimits) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model.n_layer 99999999999999999999",
       "error: config: 'model.n_layer' = 99999999999999999999 is out of range; it must be in [-2147483648, 2147483647]"},
      {"--model.n_layer 9999999999", "error: config: 'model.n_layer' = 9999999999 is out of range"},
      {"--optim.lr 1e999", "error: config: 'optim.lr' = 1e999 is out of range"},
      {"--model.rope_theta inf", "error: config: 'model.rope_theta' = inf must be a finite number"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_tessera("train " + args);
    expect_clean_failure(r, args);
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "got a string")) << args << "\n" << r.output;
  }
}

TEST_F(Cli, NumericOptionsSayWhatTheyNeed) {
  const std::string corpus = (g_root / "corpus.txt").string();
  const std::string prepare = "data prepare --input " + corpus + " --out " + (g_root / "never").string() + " ";
  const std::string plan = "plan --model gpt3-175b --cluster a100-80gb ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {plan + "--devices 0 --global-batch 8", "error: plan: --devices must be at least 1, got 0"},
      {plan + "--devices -8 --global-batch 8", "error: plan: --devices must be at least 1, got -8"},
      {plan + "--devices 8 --global-batch 0", "error: plan: --global-batch must be at least 1"},
      {plan + "--devices 8 --global-batch 8 --top 0", "error: plan: --top must be at least 1"},
      {plan + "--devices 8 --global-batch 8 --activations pytorch", "error: plan: --activations pytorch must be engine"},
      {"simulate --stages 0", "error: simulate: --stages must be at least 1"},
      {"simulate --microbatches -1", "error: simulate: --microbatches must be at least 1"},
      {"simulate --chunks 0", "error: simulate: --chunks must be at least 1"},
      {"simulate --steps 0", "error: simulate: --steps must be at least 1"},
      {"simulate --forward-time nan", "error: simulate: --forward-time must be a finite number above 0, got nan"},
      {"simulate --p2p-time -1", "error: simulate: --p2p-time must be a finite number of 0 or more, got -1"},
      {"simulate --weight-time 3", "error: simulate: --weight-time 3 is more than --backward-time 2"},
      {"sample --checkpoint x --tokens -5", "error: --tokens = -5 must be between 0 and"},
      {"sample --checkpoint x --top-k -1", "error: --top-k = -1 must be >= 0 (0 samples among the whole vocabulary)"},
      {"sample --checkpoint x --temperature inf", "error: --temperature = inf must be a finite number >= 0"},
      {"sample --checkpoint x --seed -1", "error: --seed must be 0 or more, got -1"},
      {prepare + "--val-fraction 0", "error: --val-fraction must be above 0 and at most 0.5 (e.g. 0.05), got 0"},
      {prepare + "--val-fraction -0.1", "error: --val-fraction must be above 0 and at most 0.5"},
      {prepare + "--val-fraction 1", "error: --val-fraction must be above 0 and at most 0.5"},
      {prepare + "--val-fraction nan", "error: --val-fraction must be above 0 and at most 0.5 (e.g. 0.05), got nan"},
      {prepare + "--threads -1", "error: --threads must be between 0 (every hardware thread) and 1024, got -1"},
      {prepare + "--vocab-size 0", "error: --vocab-size 0 is out of range"},
      {"data info " + g_dataset.string() + " --sample -3", "error: --sample must be 0 or more (tokens to print), got -3"},
      {"simulate --stages four", "error: --stages takes a number, got 'four' ('tessera simulate --help'"},
      {"simulate --weight-version late", "error: --weight-version: late not in {newest,delayed}"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_tessera(args);
    expect_clean_failure(r, args);
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "is required")) << args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "not in range")) << args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(g_root / "never"));
}

// A calibration measures for about a minute before it writes its file: a place it cannot write, or
// an offload folder whose disk it cannot measure, is refused before any of that, not after.
TEST_F(Cli, CalibrationRefusesAnOutputItCannotWriteBeforeMeasuring) {
  const std::string missing = (g_root / "missing" / "here.toml").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --calibrate-here --out " + missing, "error: plan --calibrate-here: cannot write " + missing +
                                                     ": the folder " + (g_root / "missing").string() + " does not exist"},
      {"plan --calibrate-here --out " + g_root.string(), "error: plan --calibrate-here: --out must name a file to write"},
      // A folder where no file can be made, whoever runs the test (root included).
      {"plan --calibrate-here --out /proc/here.toml", "error: cannot create a file in '/proc' to write '/proc/here.toml'"},
      // The disk it measures: a folder that exists, is one, and takes a file.
      {"plan --calibrate-here --out " + (g_root / "here.toml").string() + " --offload-dir " + (g_root / "nowhere").string(),
       "error: plan --calibrate-here: --offload-dir '" + (g_root / "nowhere").string() + "' does not exist"},
      {"plan --calibrate-here --out " + (g_root / "here.toml").string() + " --offload-dir /proc/version",
       "error: plan --calibrate-here: --offload-dir '/proc/version' is not a folder"},
      {"plan --calibrate-here --out " + (g_root / "here.toml").string() + " --offload-dir /proc",
       "error: plan --calibrate-here: --offload-dir '/proc' is not writable"},
      {"plan --config run.toml --cluster cpu-2core --offload-dir " + g_root.string(),
       "error: plan: --offload-dir goes with --calibrate-here"},
  };
  for (const auto& [args, message] : cases) {
    const auto start = std::chrono::steady_clock::now();
    const CliResult r = run_tessera(args);
    expect_clean_failure(r, args);
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "GFLOP/s")) << args << " measured before refusing:\n" << r.output;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0) << args;
  }
}

// `simulate --weight-version`: under the newest rule the last stage starts batch 1 on version 1;
// under the uniform delay on version 0 (the picture's titles name the version read).
TEST_F(Cli, SimulateDrawsTheWeightVersionsOfEitherTwoBWRule) {
  for (const std::string rule : {"newest", "delayed"}) {
    const fs::path svg = g_root / ("2bw_" + rule + ".svg");
    const CliResult r = run_tessera("simulate --schedule 2bw --stages 2 --microbatches 2 --steps 2 --weight-version " +
                                    rule + " --svg " + svg.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string picture = tessera::testing::read_file(svg.string());
    EXPECT_EQ(contains(picture, "forward stage 1 microbatch 2 weights v1"), rule == "newest") << rule;
    // Stage 0 starts microbatch 2 before its first step under either rule: version 0, unnamed.
    EXPECT_TRUE(contains(picture, "forward stage 0 microbatch 2 [")) << rule;
  }
}

// `simulate --timeline`: a step recorded by the pipeline benchmark (ZB-H1, p = 2, m = 4, a tiny
// model) drawn beside its simulation with both bubbles printed; a step recorded by `train` with
// log.timeline; the schedule options refused beside it.
TEST_F(Cli, SimulateDrawsAMeasuredTimelineBesideItsSimulation) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ctest sets TESSERA_SOURCE_DIR";
  const std::string recorded = std::string(source) + "/tests/cli/data/timeline_zb-h1_p2_m4.json";
  const fs::path svg = g_root / "zb.svg";
  CliResult r = run_tessera("simulate --timeline " + recorded + " --svg " + svg.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "zero bubble ZB-H1 (p = 2, m = 4), measured")) << r.output;
  EXPECT_TRUE(contains(r.output, "bubble       measured 0.5304, simulated 0.3904")) << r.output;
  const std::string picture = tessera::testing::read_file(svg.string());
  EXPECT_TRUE(picture.starts_with("<svg")) << picture.substr(0, 100);
  for (const char* row : {"measured, rank 0", "measured, rank 1", "simulated, rank 0", "simulated, rank 1"}) {
    EXPECT_TRUE(contains(picture, row)) << row;
  }

  const fs::path run = g_root / "timed_run";
  const std::string train = "train --data.dir " + g_dataset.string() + " --train.out_dir " + run.string() +
                            " --model.n_layer 1 --model.n_head 2 --model.n_embd 16 --model.seq_len 16"
                            " --train.batch_size 4 --train.micro_batch_size 2 --train.steps 3 --train.sample_tokens 0"
                            " --log.progress plain --log.peak_gflops 100 --log.timeline true";
  r = run_tessera(train);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "step 2: wrote " + (run / "timeline.json").string())) << r.output;
  r = run_tessera("simulate --timeline " + (run / "timeline.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "1F1B (PipeDream-Flush) (p = 1, m = 2), measured")) << r.output;
  EXPECT_TRUE(contains(r.output, "bubble       measured ")) << r.output;
  EXPECT_TRUE(fs::exists(run / "timeline.svg")) << "the picture goes next to the timeline";

  r = run_tessera("simulate --timeline " + recorded + " --stages 2");
  expect_clean_failure(r, "simulate --timeline --stages");
  EXPECT_TRUE(contains(r.output, "error: --stages excludes --timeline")) << r.output;
  r = run_tessera("simulate --timeline " + (g_root / "none.json").string());
  expect_clean_failure(r, "simulate --timeline none.json");
  EXPECT_TRUE(contains(r.output, "error: cannot read the timeline")) << r.output;
}

}  // namespace

// `tessera compatibility --array`: each configuration of the covering array as a command line that
// names its processes, then every pair that runs with the configuration that trains it, each of
// those configurations listed above.
TEST_F(Cli, CompatibilityArrayPrintsConfigurationsAndThePairsTheyTrain) {
  const CliResult r = run_tessera("compatibility --array");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> listed, used;
  size_t pairs = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("configuration ", 0) == 0) {
      listed.insert(line.substr(0, line.find(' ', 14)));
      EXPECT_TRUE(contains(line, ": tessera launch -n ")) << line;
      EXPECT_TRUE(contains(line, " -- train --model.n_layer 4 ")) << line;
    } else {
      const size_t at = line.find(": configuration ");
      ASSERT_NE(at, std::string::npos) << line;
      EXPECT_TRUE(contains(line.substr(0, at), " with ")) << line;
      used.insert(line.substr(at + 2));
      ++pairs;
    }
  }
  EXPECT_GT(listed.size(), 10u);
  EXPECT_GT(pairs, 700u);
  for (const std::string& c : used) EXPECT_TRUE(listed.contains(c)) << c << " is not listed";
  EXPECT_EQ(used.size(), listed.size()) << "a configuration that trains no pair first";
}

// `tessera config-keys`: the README's config reference, a row per key; with --fuzz-dictionary the
// sections and keys as dictionary lines. (That the README holds exactly this table is
// tests/train/test_config_keys.cpp.)
TEST_F(Cli, ConfigKeysPrintsTheReadmeTableAndTheFuzzDictionary) {
  CliResult r = run_tessera("config-keys");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("| key | default | meaning |\n|---|---|---|\n", 0), 0u) << r.output;
  EXPECT_TRUE(contains(r.output, "\n| `train.steps` | 1000 | optimizer steps of the run |\n")) << r.output;
  r = run_tessera("config-keys --fuzz-dictionary");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\n\"[train]\"\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "\n\"steps\"\n")) << r.output;
}

// Output that could not be written (a full disk: /dev/full) fails the command, even when the
// buffer only reaches the file as the program ends.
TEST_F(Cli, OutputThatCouldNotBeWrittenFailsTheCommand) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const CliResult ok = run_tessera("simulate --schedule 1f1b --stages 2 --microbatches 4 > /dev/null");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const CliResult full = run_tessera("simulate --schedule 1f1b --stages 2 --microbatches 4 > /dev/full");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  // Where the message can go, it says what happened.
  const CliResult said = run_tessera("simulate --schedule 1f1b --stages 2 --microbatches 4 2>&1 > /dev/full | cat");
  EXPECT_NE(said.output.find("error: could not write the output: No space left on device"), std::string::npos)
      << said.output;
}

// `plan --config` predicts the run its config describes: an option of the layout search beside it
// would be ignored, so it is refused, naming the option, before the config is read.
TEST_F(Cli, PlanWithAConfigRefusesTheSearchsOptions) {
  for (const std::string option : {"--layout tp=2,pp=1,dp=1,mb=1", "--devices 64", "--global-batch 9", "--top 3",
                                   "--precision fp32", "--overlap", "--model gpt3-175b"}) {
    const std::string args = "plan --config run.toml --cluster cpu-2core " + option;
    const CliResult r = run_tessera(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    const std::string name = option.substr(0, option.find(' '));
    EXPECT_TRUE(contains(r.output, "error: plan: " + name + " goes with the layout search")) << args << "\n" << r.output;
  }
}

// A validation split too small for one sequence of the run's context: `data prepare` warns, and the
// run is refused naming that split before it makes its folder (every run evaluates at its end).
TEST_F(Cli, AValidationSplitTooSmallForOneSequenceIsSaidAtPrepareAndRefusedAtStart) {
  const fs::path small = g_root / "small_val";
  CliResult r = run_tessera("data prepare --input " + (g_root / "corpus.txt").string() + " --out " + small.string() +
                            " --vocab-size 300 --val-fraction 0.002");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "validation tokens hold no sequence of model.seq_len")) << r.output;
  const fs::path run = g_root / "small_val_run";
  const std::string args = "train --data.dir " + small.string() + " --train.out_dir " + run.string() +
                           " --model.n_layer 1 --model.n_head 2 --model.n_embd 16 --model.seq_len 64"
                           " --train.batch_size 2 --train.micro_batch_size 2 --train.steps 1 --train.eval_every 0";
  r = run_tessera(args);
  expect_clean_failure(r, args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "error: the validation split " + (small / "val.bin").string())) << r.output;
  EXPECT_TRUE(contains(r.output, "fewer than the model.seq_len + 1 = 65 of one evaluation sequence")) << r.output;
  EXPECT_FALSE(fs::exists(run)) << "the run folder was made before the refusal";
}
