// The training step `tessera plan --calibrate-here` measures whole: the engine's own step on a
// reference model, against which its kernel-by-kernel prediction is set (calibrate_here.h).
#include "cli/calibrate_step.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/calibrate_here.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/rng.h"
#include "dist/mpi_runtime.h"
#include "dist/startup_guard.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"

namespace tessera::cli {

config::ModelConfig reference_model() {
  config::ModelConfig m;
  m.arch = config::Architecture::Gpt2;
  m.n_layer = 2;
  m.n_head = 3;
  m.n_embd = 192;
  m.seq_len = 128;
  m.vocab_size = 1536;
  return m;
}

double training_step_seconds(const config::ModelConfig& model, int batch, int threads, dist::Communicator* dp) {
  using Clock = std::chrono::steady_clock;
  constexpr int kWarmup = 2, kSteps = 10;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  MemoryAccountant memory;
  nn::GPT gpt(model, memory, 1);
  const int replicas = dp ? dp->size() : 1;
  const auto rank = static_cast<uint64_t>(dp ? dp->rank() : 0);
  parallel::EngineOptions options;
  options.layout.dp = replicas;
  options.layout.micro_batch = batch;
  options.layout.global_batch = int64_t{batch} * replicas;
  options.seq_len = model.seq_len;
  std::optional<dist::Mesh> mesh;
  if (dp != nullptr) mesh.emplace(*dp, options.layout);
  parallel::TrainingEngine engine(gpt, memory, mesh ? &*mesh : nullptr, options);
  const int T = model.seq_len;
  std::vector<double> seconds;
  for (int s = 0; s < kWarmup + kSteps; ++s) {
    // A different batch each step (and on each replica), as training sees.
    std::vector<int32_t> tokens, targets;
    for (int i = 0; i <= batch * T; ++i) {
      tokens.push_back(static_cast<int32_t>(uniform(1 + rank, static_cast<uint64_t>(s), static_cast<uint64_t>(i)) *
                                            static_cast<float>(model.vocab_size - 1)));
    }
    targets.assign(tokens.begin() + 1, tokens.end());
    tokens.pop_back();
    const exec::MicrobatchInput input{{nn::token_tensor(tokens.data(), batch, T), nn::token_tensor(targets.data(), batch, T),
                                       1.0f / static_cast<float>(batch * T)},
                                      0};
    const auto t0 = Clock::now();
    // The trainer's step: forward and backward, the gradient norm with clipping, AdamW.
    engine.train_step(std::span(&input, 1), {1, static_cast<uint64_t>(s)}, 1e-4f, 1.0);
    if (s >= kWarmup) seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  omp_set_num_threads(saved);
  // The median step, the figure a run's steps are summed up by (bench/planner_here.sh holds the
  // planner to a run's median step): a typical step, with the jitter of this machine.
  std::nth_element(seconds.begin(), seconds.begin() + kSteps / 2, seconds.end());
  return seconds[kSteps / 2];
}

void measure_step(const std::string& out, int threads) {
  TS_CHECK(threads >= 1, "plan --calibrate-step needs --step-threads of at least 1, got {}", threads);
  if (dist::launcher_size() > 1) {
    // Started as ranks (`tessera launch -n N -- plan --calibrate-step`): a data-parallel step over
    // them, with the communicator, its progress thread and the gradient all-reduce, as a run's
    // ranks step. Rank 0 writes the mean of the ranks' medians.
    dist::MpiRuntime mpi;
    std::unique_ptr<dist::Communicator> world = mpi.world();
    auto seconds = static_cast<float>(training_step_seconds(reference_model(), kReferenceBatch, threads, world.get()));
    world->all_reduce(&seconds, 1, DType::F32, dist::ReduceOp::Sum)->wait();
    if (world->rank() == 0) {
      write_file_atomically(out, nlohmann::json{{"seconds", double(seconds) / world->size()}}.dump());
    }
    return;
  }
  const double seconds = training_step_seconds(reference_model(), kReferenceBatch, threads);
  write_file_atomically(out, nlohmann::json{{"seconds", seconds}}.dump());
}

}  // namespace tessera::cli
