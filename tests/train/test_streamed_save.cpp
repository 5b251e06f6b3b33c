// A checkpoint of a run whose parameters and optimizer state live in the nvme tier (ZeRO-3 at dp 1,
// memory.offload_params and memory.offload_optimizer = "nvme") is written as a stream: the model
// one parameter at a time, the optimizer state one chunk at a time. Its files are byte for byte
// those of the same run in memory, the steps after the save are too, and the save adds far less
// than the whole state to compute memory. It is loaded as a stream too: a resumed run continues the
// uninterrupted one bit for bit, and the load adds no more than a save does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/rng.h"
#include "data/loader.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Four blocks of width 32 and AdamW chunks of about 20 KB: most chunks are one or two parameters,
// so the state streams through many of them.
RunConfig small_run(bool offloaded) {
  RunConfig cfg;
  cfg.model.n_layer = 4;
  cfg.model.n_head = 2;
  cfg.model.n_embd = 32;
  cfg.model.vocab_size = 96;
  cfg.model.seq_len = 16;
  cfg.train.batch_size = 4;
  cfg.train.micro_batch_size = 2;
  cfg.train.seed = 11;
  cfg.parallel.zero_stage = 3;
  if (offloaded) {
    cfg.memory.offload_params = "nvme";
    cfg.memory.offload_optimizer = "nvme";
    cfg.memory.offload_chunk_mb = 0.02;
  }
  return cfg;
}

// One process's training engine over a small model, stepped on synthetic tokens and saved.
class SmallRun {
 public:
  SmallRun(const RunConfig& cfg, const fs::path& dir) : cfg_(cfg), dir_(dir), model_(cfg.model, memory_, cfg.train.seed) {
    fs::create_directories(dir / "offload");
    parallel::EngineOptions options = engine_options(cfg);
    options.offload_dir = (dir / "offload").string();
    options.measure_unit_times = false;  // the same plan in both runs
    engine_ = std::make_unique<parallel::TrainingEngine>(model_, memory_, nullptr, options);
  }

  // The step's loss sum.
  double step(int step) {
    const int T = cfg_.model.seq_len, B = cfg_.train.micro_batch_size;
    const int micros = cfg_.train.batch_size / B;
    std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(micros)), targets(static_cast<size_t>(micros));
    std::vector<exec::MicrobatchInput> microbatches;
    for (int m = 0; m < micros; ++m) {
      for (int i = 0; i < B * (T + 1); ++i) {
        const auto token = static_cast<int32_t>(
            uniform(cfg_.train.seed, 100 + static_cast<uint64_t>(step), static_cast<uint64_t>(m * B * (T + 1) + i)) *
            static_cast<float>(cfg_.model.vocab_size));
        if (i % (T + 1) < T) inputs[static_cast<size_t>(m)].push_back(token);
        if (i % (T + 1) > 0) targets[static_cast<size_t>(m)].push_back(token);
      }
      microbatches.push_back({{nn::token_tensor(inputs[static_cast<size_t>(m)].data(), B, T),
                               nn::token_tensor(targets[static_cast<size_t>(m)].data(), B, T),
                               1.0f / static_cast<float>(cfg_.train.batch_size * T)},
                              int64_t{m} * B});
    }
    return engine_->train_step(microbatches, {cfg_.train.seed, static_cast<uint64_t>(step), nullptr}, 1e-2f, 1.0)
        .loss_sum;
  }

  // The checkpoint folder of step `step`, saved as the training loop saves it.
  fs::path save(int64_t step) {
    CheckpointStore store((dir_ / "checkpoints").string(), 10);
    // The data position of a loader that served `step` global batches (a load checks its fields).
    data::LoaderState position;
    position.sequences = static_cast<uint64_t>(step * cfg_.train.batch_size);
    position.steps = static_cast<uint64_t>(step);
    position.seed = cfg_.train.seed;
    position.seq_len = cfg_.model.seq_len;
    const CheckpointState state{step, data::to_json(position), cfg_.train.seed, {}, 0, std::nullopt, std::nullopt};
    return save_run_checkpoint(store, cfg_, state, model_, *engine_, "", nullptr);
  }

  // Loads a checkpoint as resuming does.
  LoadedCheckpoint load(const fs::path& checkpoint) {
    return load_run_checkpoint(checkpoint.string(), cfg_, model_, *engine_, nullptr);
  }

  MemoryAccountant& memory() { return memory_; }
  nn::GPT& model() { return model_; }
  parallel::TrainingEngine& engine() { return *engine_; }

 private:
  RunConfig cfg_;
  fs::path dir_;
  MemoryAccountant memory_;
  nn::GPT model_;
  std::unique_ptr<parallel::TrainingEngine> engine_;
};

class OffloadedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / fmt::format("tessera_streamed_save_{}", ::getpid());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

const std::vector<std::string> kFiles = {"model.safetensors", "optimizer.rank00000.safetensors"};

TEST_F(OffloadedCheckpoint, AnOffloadedRunSavesTheInMemoryRunsFilesAndStepsOnUnchanged) {
  SmallRun plain(small_run(false), root_ / "plain");
  SmallRun offloaded(small_run(true), root_ / "offloaded");
  ASSERT_GT(offloaded.engine().optimizer_state_chunks(), 4u) << "the state streams through several chunks";
  for (int step = 0; step < 2; ++step) {
    plain.step(step);
    offloaded.step(step);
  }
  const fs::path a = plain.save(2), b = offloaded.save(2);
  for (const std::string& file : kFiles) {
    EXPECT_EQ(read_bytes(a / file), read_bytes(b / file)) << file << " differs when saved from the nvme tier";
  }
  // The save left the chunks read ahead and the shard as the next step needs them.
  for (int step = 2; step < 4; ++step) {
    plain.step(step);
    offloaded.step(step);
  }
  const fs::path c = plain.save(4), d = offloaded.save(4);
  for (const std::string& file : kFiles) {
    EXPECT_EQ(read_bytes(c / file), read_bytes(d / file)) << file << " differs in the steps after a save";
  }
}

// What a streamed save or load may add to compute memory, against the whole state.
struct StreamBound {
  size_t bound = 0;
  size_t whole_state = 0;
};

StreamBound stream_bound(nn::GPT& model) {
  int64_t largest = 0, elements = 0;
  for (const nn::Parameter& p : model.parameters().all()) {
    largest = std::max(largest, p.numel());
    elements += p.numel();
  }
  const size_t largest_parameter = sizeof(float) * static_cast<size_t>(largest);
  // AdamW's two moments per element; a chunk is at least one whole parameter.
  const size_t chunk = std::max<size_t>(static_cast<size_t>(0.02 * 1048576.0), 2 * largest_parameter);
  return {largest_parameter + 3 * chunk, 2 * sizeof(float) * static_cast<size_t>(elements)};
}

TEST_F(OffloadedCheckpoint, TheSaveHoldsAParameterAndAChunkNotTheWholeState) {
  SmallRun offloaded(small_run(true), root_ / "offloaded");
  offloaded.step(0);
  const auto [bound, whole_state] = stream_bound(offloaded.model());
  ASSERT_LT(bound, whole_state / 2) << "the model is large enough for the bound to tell";

  MemoryAccountant& memory = offloaded.memory();
  const size_t before = memory.stats().live_total;
  memory.reset_peaks();
  offloaded.save(1);
  const MemoryStats during = memory.stats();
  EXPECT_LE(during.peak_total - before, bound)
      << fmt::format("the save added {} bytes (optimizer {}, comm {}) to compute memory; the whole state is {}",
                     during.peak_total - before, during.peak_of(MemoryTag::Optimizer), during.peak_of(MemoryTag::Comm),
                     whole_state);
  EXPECT_EQ(during.live_total, before) << "the save leaves compute memory as it found it";
}

TEST_F(OffloadedCheckpoint, AResumedRunLoadsOneParameterAndOneChunkAtATimeAndContinuesBitForBit) {
  SmallRun uninterrupted(small_run(true), root_ / "uninterrupted");
  std::vector<double> losses;
  fs::path at_two;
  for (int step = 0; step < 4; ++step) {
    if (step == 2) at_two = uninterrupted.save(2);
    losses.push_back(uninterrupted.step(step));
  }
  const fs::path at_four = uninterrupted.save(4);

  // A new process's run (its own nvme tier, its parameters as initialized) resumed from step 2.
  SmallRun resumed(small_run(true), root_ / "resumed");
  const LoadedCheckpoint loaded = resumed.load(at_two);
  EXPECT_EQ(loaded.state.step, 2);
  EXPECT_TRUE(loaded.parameters_one_at_a_time) << "the parameters went to the nvme tier one at a time";
  EXPECT_TRUE(loaded.optimizer_chunk_by_chunk) << "the optimizer state went to the nvme tier chunk by chunk";
  // The loaded bits are those saved: saving them again gives the same files.
  const fs::path again = resumed.save(2);
  for (const std::string& file : kFiles) {
    EXPECT_EQ(read_bytes(at_two / file), read_bytes(again / file)) << file << " differs once loaded";
  }
  for (int step = 2; step < 4; ++step) {
    EXPECT_EQ(resumed.step(step), losses[static_cast<size_t>(step)]) << "step " << step << " after resuming";
  }
  const fs::path end = resumed.save(4);
  for (const std::string& file : kFiles) {
    EXPECT_EQ(read_bytes(at_four / file), read_bytes(end / file)) << file << " differs from the uninterrupted run's";
  }
}

TEST_F(OffloadedCheckpoint, WeightsToStartFromAreWrittenOneParameterAtATime) {
  SmallRun trained(small_run(true), root_ / "trained");
  trained.step(0);
  const fs::path checkpoint = trained.save(1);
  SmallRun started(small_run(true), root_ / "started");
  MemoryAccountant& memory = started.memory();
  const size_t before = memory.stats().live_total;
  memory.reset_peaks();
  load_run_weights(checkpoint.string(), small_run(true), started.model(), started.engine());
  int64_t largest = 0;
  for (const nn::Parameter& p : started.model().parameters().all()) largest = std::max(largest, p.numel());
  EXPECT_LE(memory.stats().peak_total - before, sizeof(float) * static_cast<size_t>(largest))
      << "one parameter in compute memory at a time";
  // The weights went into the nvme tier: the model file saved from there is the checkpoint's.
  const fs::path saved = started.save(0);
  EXPECT_EQ(read_bytes(checkpoint / "model.safetensors"), read_bytes(saved / "model.safetensors"));
}

TEST_F(OffloadedCheckpoint, TheLoadHoldsAParameterAndAChunkNotTheWholeState) {
  SmallRun saved(small_run(true), root_ / "saved");
  saved.step(0);
  const fs::path checkpoint = saved.save(1);
  SmallRun resumed(small_run(true), root_ / "resumed");
  const auto [bound, whole_state] = stream_bound(resumed.model());
  ASSERT_LT(bound, whole_state / 2) << "the model is large enough for the bound to tell";

  MemoryAccountant& memory = resumed.memory();
  const size_t before = memory.stats().live_total;
  memory.reset_peaks();
  resumed.load(checkpoint);
  const MemoryStats during = memory.stats();
  EXPECT_LE(during.peak_total - before, bound)
      << fmt::format("the load added {} bytes (optimizer {}, comm {}) to compute memory; the whole state is {}",
                     during.peak_total - before, during.peak_of(MemoryTag::Optimizer), during.peak_of(MemoryTag::Comm),
                     whole_state);
  EXPECT_LE(during.live_total, before) << "the loaded state is in the nvme tier, not in compute memory";
}

}  // namespace
}  // namespace tessera::train
