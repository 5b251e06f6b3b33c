// Under mpirun: a checkpoint of a run whose parameters and optimizer state live in the nvme tier
// under data parallelism (ZeRO-3 at dp 2, memory.offload_params and memory.offload_optimizer =
// "nvme") is written and read as a stream, as at dp 1 (test_streamed_save.cpp): each parameter is
// gathered from the ranks' shards as the model file reaches it and let go before the next, so the
// save adds one parameter and the optimizer's chunks to compute memory, not the whole model. Its
// files are byte for byte those of the same run in memory; a load writes each rank's part of every
// parameter into its shard one parameter at a time, and the resumed run continues the
// uninterrupted one bit for bit; one process without offloading resumes the same checkpoint as it
// resumes the in-memory run's.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/rng.h"
#include "data/loader.h"
#include "nn/gpt.h"
#include "parallel/rank_sum.h"
#include "parallel/training_engine.h"
#include "parity_harness.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using testing::RankChecks;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Six blocks of width 32 and AdamW chunks of about 20 KB, as at dp 1: the whole model (what a
// gather of all of it adds) is about twice what a streamed save may add.
RunConfig small_run(bool offloaded, int dp) {
  RunConfig cfg;
  cfg.model.n_layer = 6;
  cfg.model.n_head = 2;
  cfg.model.n_embd = 32;
  cfg.model.vocab_size = 96;
  cfg.model.seq_len = 16;
  cfg.train.batch_size = 8;
  cfg.train.micro_batch_size = 2;
  cfg.train.seed = 11;
  cfg.parallel.dp = dp;
  cfg.parallel.zero_stage = dp > 1 ? 3 : 0;
  if (offloaded) {
    cfg.memory.offload_params = "nvme";
    cfg.memory.offload_optimizer = "nvme";
    cfg.memory.offload_chunk_mb = 0.02;
  }
  return cfg;
}

// One rank's training engine over the small model (`comm` null: one process), stepped on synthetic
// tokens keyed by the global row, so every layout steps on the same global batch.
class SmallRun {
 public:
  SmallRun(const RunConfig& cfg, const fs::path& dir, dist::Communicator* comm)
      : cfg_(cfg), dir_(dir), comm_(comm), model_(cfg.model, memory_, cfg.train.seed) {
    const int rank = comm == nullptr ? 0 : comm->rank();
    const fs::path offload = dir / fmt::format("offload-rank{}", rank);
    fs::create_directories(offload);
    parallel::EngineOptions options = engine_options(cfg);
    options.offload_dir = offload.string();
    options.measure_unit_times = false;  // the same plan in every run
    if (comm != nullptr) mesh_.emplace(*comm, options.layout);
    engine_ = std::make_unique<parallel::TrainingEngine>(model_, memory_, mesh_ ? &*mesh_ : nullptr, options);
  }

  // The step's loss sum over the whole global batch.
  double step(int step) {
    const int T = cfg_.model.seq_len, B = cfg_.train.micro_batch_size;
    const int ranks = comm_ == nullptr ? 1 : comm_->size(), rank = comm_ == nullptr ? 0 : comm_->rank();
    const int micros = cfg_.train.batch_size / (B * ranks);
    std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(micros)), targets(static_cast<size_t>(micros));
    std::vector<exec::MicrobatchInput> microbatches;
    for (int m = 0; m < micros; ++m) {
      const int64_t first_row = int64_t{rank * micros + m} * B;
      for (int64_t i = first_row * (T + 1); i < (first_row + B) * (T + 1); ++i) {
        const auto token = static_cast<int32_t>(
            uniform(cfg_.train.seed, 100 + static_cast<uint64_t>(step), static_cast<uint64_t>(i)) *
            static_cast<float>(cfg_.model.vocab_size));
        if (i % (T + 1) < T) inputs[static_cast<size_t>(m)].push_back(token);
        if (i % (T + 1) > 0) targets[static_cast<size_t>(m)].push_back(token);
      }
      microbatches.push_back({{nn::token_tensor(inputs[static_cast<size_t>(m)].data(), B, T),
                               nn::token_tensor(targets[static_cast<size_t>(m)].data(), B, T),
                               1.0f / static_cast<float>(cfg_.train.batch_size * T)},
                              first_row});
    }
    const double mine =
        engine_->train_step(microbatches, {cfg_.train.seed, static_cast<uint64_t>(step), nullptr}, 1e-2f, 1.0).loss_sum;
    return parallel::sum_over_ranks(comm_, std::span(&mine, 1))[0];
  }

  // The checkpoint folder of step `step`, saved as the training loop saves it.
  fs::path save(int64_t step) {
    CheckpointStore store((dir_ / "checkpoints").string(), 10);
    data::LoaderState position;
    position.sequences = static_cast<uint64_t>(step * cfg_.train.batch_size);
    position.steps = static_cast<uint64_t>(step);
    position.seed = cfg_.train.seed;
    position.seq_len = cfg_.model.seq_len;
    const CheckpointState state{step, data::to_json(position), cfg_.train.seed, {}, 0, std::nullopt, std::nullopt};
    return save_run_checkpoint(store, cfg_, state, model_, *engine_, "", comm_);
  }

  LoadedCheckpoint load(const fs::path& checkpoint) {
    return load_run_checkpoint(checkpoint.string(), cfg_, model_, *engine_, comm_);
  }

  MemoryAccountant& memory() { return memory_; }
  nn::GPT& model() { return model_; }

 private:
  RunConfig cfg_;
  fs::path dir_;
  dist::Communicator* comm_;
  MemoryAccountant memory_;
  nn::GPT model_;
  std::optional<dist::Mesh> mesh_;
  std::unique_ptr<parallel::TrainingEngine> engine_;
};

// What a streamed save or load may add to one rank's compute memory (the bound of
// test_streamed_save.cpp: the largest parameter and three chunks), and what the whole model is.
struct StreamBound {
  size_t bound = 0;
  size_t whole_model = 0;
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
  return {largest_parameter + 3 * chunk, sizeof(float) * static_cast<size_t>(elements)};
}

// Runs `body` and checks what it added to `memory` at its peak against the bound, and what it left.
template <class Body>
void check_streamed(MemoryAccountant& memory, const StreamBound& limit, const std::string& what, RankChecks& t,
                    Body body) {
  const size_t before = memory.stats().live_total;
  memory.reset_peaks();
  body();
  const MemoryStats during = memory.stats();
  t.expect(during.peak_total - before <= limit.bound,
           fmt::format("{} added {} bytes (optimizer {}, comm {}) to compute memory on rank {}; at most {} may be "
                       "added, the whole model is {}",
                       what, during.peak_total - before, during.peak_of(MemoryTag::Optimizer),
                       during.peak_of(MemoryTag::Comm), t.rank, limit.bound, limit.whole_model));
  if (t.rank == 0) {
    fmt::print("{}: {} bytes added on rank 0 (at most {}; the whole model is {})\n", what, during.peak_total - before,
               limit.bound, limit.whole_model);
  }
  t.expect(during.live_total == before, fmt::format("{} leaves compute memory on rank {} as it found it ({} bytes "
                                                    "live, {} before)", what, t.rank, during.live_total, before));
}

std::vector<std::string> checkpoint_files(int ranks) {
  std::vector<std::string> files = {"model.safetensors"};
  for (int r = 0; r < ranks; ++r) files.push_back(fmt::format("optimizer.rank{:05d}.safetensors", r));
  return files;
}

void expect_same_files(const fs::path& a, const fs::path& b, int ranks, const std::string& what, RankChecks& t) {
  for (const std::string& file : checkpoint_files(ranks)) {
    t.expect(read_bytes(a / file) == read_bytes(b / file), fmt::format("{}: {} differs", what, file));
  }
}

void check_streamed_checkpoints(dist::Communicator& world, RankChecks& t) {
  const int ranks = world.size();
  // One folder for every rank, named after rank 0's process.
  int32_t owner = ::getpid();
  world.broadcast(std::span(&owner, 1), 0)->wait();
  const fs::path root = fs::temp_directory_path() / fmt::format("tessera_streamed_save_dp_{}", owner);

  SmallRun plain(small_run(false, ranks), root / "plain", &world);
  SmallRun offloaded(small_run(true, ranks), root / "offloaded", &world);
  const StreamBound limit = stream_bound(offloaded.model());
  t.expect(limit.bound < limit.whole_model, "the model is large enough for the bound to tell a gather of all of it");
  std::vector<double> losses;
  for (int step = 0; step < 2; ++step) {
    const double in_memory = plain.step(step);
    losses.push_back(offloaded.step(step));
    t.expect(losses.back() == in_memory, fmt::format("step {}: the offloaded run's loss is the in-memory run's", step));
  }
  const fs::path plain_2 = plain.save(2);
  fs::path at_2;
  check_streamed(offloaded.memory(), limit, "the save at dp " + std::to_string(ranks), t,
                 [&] { at_2 = offloaded.save(2); });
  if (t.rank == 0) expect_same_files(plain_2, at_2, ranks, "saved from the nvme tier", t);
  // The save left the shard and the chunks as the next steps need them.
  for (int step = 2; step < 4; ++step) {
    plain.step(step);
    losses.push_back(offloaded.step(step));
  }
  const fs::path plain_4 = plain.save(4), at_4 = offloaded.save(4);
  if (t.rank == 0) expect_same_files(plain_4, at_4, ranks, "saved after steps that followed a save", t);

  // A new job's run (its own nvme tier, its parameters as initialized) resumed from step 2.
  SmallRun resumed(small_run(true, ranks), root / "resumed", &world);
  LoadedCheckpoint loaded;
  check_streamed(resumed.memory(), limit, "the load at dp " + std::to_string(ranks), t,
                 [&] { loaded = resumed.load(at_2); });
  t.expect(loaded.parameters_one_at_a_time, "the parameters went to the nvme tier one at a time");
  t.expect(loaded.optimizer_chunk_by_chunk, "the optimizer state went to the nvme tier chunk by chunk");
  const fs::path again = resumed.save(2);
  if (t.rank == 0) expect_same_files(at_2, again, ranks, "saved again once loaded", t);
  for (int step = 2; step < 4; ++step) {
    const double loss = resumed.step(step);
    t.expect(loss == losses[static_cast<size_t>(step)], fmt::format("step {} after resuming: loss {} vs the "
                                                                    "uninterrupted run's {}", step, loss,
                                                                    losses[static_cast<size_t>(step)]));
  }
  const fs::path end = resumed.save(4);
  if (t.rank == 0) expect_same_files(at_4, end, ranks, "the resumed run's step 4", t);

  // Another layout: one process without offloading resumes the streamed checkpoint as it resumes
  // the in-memory run's (bit for bit), and continues the run within 1e-5 as resharding does.
  if (t.rank == 0) {
    SmallRun from_streamed(small_run(false, 1), root / "one_from_streamed", nullptr);
    SmallRun from_plain(small_run(false, 1), root / "one_from_plain", nullptr);
    from_streamed.load(at_2);
    from_plain.load(plain_2);
    for (int step = 2; step < 4; ++step) {
      const double loss = from_streamed.step(step), want = from_plain.step(step);
      const double dp_loss = losses[static_cast<size_t>(step)];
      t.expect(loss == want, fmt::format("step {} in one process: resumed from the streamed checkpoint {} vs from the "
                                         "in-memory one {}", step, loss, want));
      t.expect(std::abs(loss - dp_loss) <= 1e-5 * std::abs(dp_loss),
               fmt::format("step {} in one process: {} vs {} at dp {}", step, loss, dp_loss, ranks));
    }
  }
  world.barrier()->wait();
  if (t.rank == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace tessera::train

int main(int argc, char** argv) {
  return tessera::testing::run_rank_checks(argc, argv, tessera::train::check_streamed_checkpoints);
}
