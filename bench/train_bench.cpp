// Training throughput of tessera's GPT on this CPU: W warmup steps, then S timed steps of the
// trainer's step (the interpreter running forward and backward, then the AdamW update and zeroed
// gradients) on random tokens (fp32, GPT-2 style,
// tied embeddings, biases). Prints a short table and, last, one JSON line with tokens/s, the
// median step time and the share of time spent in forward, backward and the optimizer.
//
//   train_bench --layers 4 --embd 256 --heads 4 --seq 128 --batch 8 --vocab 256 --steps 10
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "config/precision.h"
#include "core/rng.h"
#include "kernels/cpu/matmul.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Time spent in forward and backward actions, from the outermost slot of the transform chain.
class PhaseTimer final : public tessera::exec::Transform {
 public:
  std::string_view name() const override { return "phase timer"; }
  void before(const tessera::exec::Event&) override { start_ = Clock::now(); }
  void after(const tessera::exec::Event& e) override {
    (tessera::exec::is_forward(e.phase) ? forward : backward) += seconds_between(start_, Clock::now());
  }
  void reset() { forward = backward = 0; }
  double forward = 0, backward = 0;

 private:
  Clock::time_point start_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  tessera::config::ModelConfig model;
  model.arch = tessera::config::Architecture::Gpt2;
  model.bias = true;
  model.tied_embeddings = true;
  int batch = 8, warmup = 2, steps = 10, threads = 2;
  float lr = 3e-4f;
  std::string precision = "fp32";
  CLI::App app{"tessera GPT training throughput (AdamW)"};
  app.add_option("--layers", model.n_layer, "L")->check(CLI::PositiveNumber);
  app.add_option("--embd", model.n_embd, "C")->check(CLI::PositiveNumber);
  app.add_option("--heads", model.n_head, "H")->check(CLI::PositiveNumber);
  app.add_option("--seq", model.seq_len, "T (sequence length and context)")->check(CLI::PositiveNumber);
  app.add_option("--vocab", model.vocab_size, "V")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "B")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "OpenMP and OpenBLAS threads")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "AdamW learning rate");
  app.add_option("--precision", precision, "compute dtype: fp32, bf16 or fp16 (precision.compute)");
  CLI11_PARSE(app, argc, argv);

  try {
    model.validate();
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);

    const int B = batch, T = model.seq_len, V = model.vocab_size;
    tessera::MemoryAccountant memory;
    tessera::nn::GPT gpt(model, memory, 1234);
    // The step the trainer runs: one microbatch through the interpreter, then clipping and AdamW.
    tessera::parallel::EngineOptions options;
    options.optimizer = {};  // AdamW: beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
    options.layout.micro_batch = B;
    options.layout.global_batch = B;
    options.seq_len = T;
    options.precision.compute = tessera::config::parse_precision(precision, "--precision");
    options.precision.loss_scaling.enabled = options.precision.compute == tessera::DType::F16;
    tessera::parallel::TrainingEngine engine(gpt, memory, nullptr, options);
    PhaseTimer timer;
    engine.transforms().add(tessera::exec::TransformSlot::Observer, timer);

    // Random tokens; a different batch each step, as training would see.
    const int total = warmup + steps;
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(total)), targets(static_cast<size_t>(total));
    for (int s = 0; s < total; ++s) {
      for (int i = 0; i < B * T + 1; ++i) {
        tokens[s].push_back(static_cast<int32_t>(tessera::uniform(7, static_cast<uint64_t>(s), static_cast<uint64_t>(i)) *
                                                 static_cast<float>(V)));
      }
      targets[s].assign(tokens[s].begin() + 1, tokens[s].end());
      tokens[s].pop_back();
    }

    std::vector<double> step_s, forward_s, backward_s, optimizer_s;
    double loss_first = 0, loss_last = 0;
    for (int s = 0; s < total; ++s) {
      const tessera::exec::MicrobatchInput input{{tessera::nn::token_tensor(tokens[s].data(), B, T),
                                                  tessera::nn::token_tensor(targets[s].data(), B, T),
                                                  1.0f / static_cast<float>(B * T)},
                                                 0};
      timer.reset();
      auto t0 = Clock::now();
      // No gradient norm: the PyTorch step this is compared with does not measure one.
      const auto result = engine.train_step(std::span(&input, 1), {1234, static_cast<uint64_t>(s)}, lr, std::nullopt);
      auto t1 = Clock::now();
      const double loss = result.loss_sum / (B * T);
      if (s == 0) loss_first = loss;
      loss_last = loss;
      if (s < warmup) continue;
      const double step_seconds = seconds_between(t0, t1);
      forward_s.push_back(timer.forward);
      backward_s.push_back(timer.backward);
      optimizer_s.push_back(step_seconds - timer.forward - timer.backward);
      step_s.push_back(step_seconds);
    }
    engine.transforms().remove(tessera::exec::TransformSlot::Observer);

    double sum_f = 0, sum_b = 0, sum_o = 0, sum_all = 0;
    for (size_t i = 0; i < step_s.size(); ++i) {
      sum_f += forward_s[i];
      sum_b += backward_s[i];
      sum_o += optimizer_s[i];
      sum_all += step_s[i];
    }
    const double ms = 1e3 * median(step_s);
    const double tokens_per_s = B * T / (ms / 1e3);
    const int64_t params = gpt.parameters().numel();
    const auto peak_mib = static_cast<double>(memory.stats().peak_total) / (1 << 20);

    const std::string gemm = options.precision.mixed() ? tessera::kernels::half_gemm_description() : "sgemm";
    fmt::print("tessera L={} C={} H={} T={} B={} V={}: {} parameters, {} threads, {}, matmuls by {}, {} warmup + {} "
               "timed steps\n",
               model.n_layer, model.n_embd, model.n_head, T, B, V, params, threads, precision, gemm, warmup, steps);
    fmt::print("  {:.1f} ms/step (median), {:.0f} tokens/s; forward {:.0f}%, backward {:.0f}%, optimizer {:.0f}%; "
               "loss {:.4f} -> {:.4f}; peak memory {:.0f} MiB\n",
               ms, tokens_per_s, 100 * sum_f / sum_all, 100 * sum_b / sum_all, 100 * sum_o / sum_all, loss_first,
               loss_last, peak_mib);
    fmt::print(
        "{{\"impl\": \"tessera\", \"L\": {}, \"C\": {}, \"H\": {}, \"T\": {}, \"B\": {}, \"V\": {}, \"params\": {}, "
        "\"threads\": {}, \"warmup\": {}, \"steps\": {}, \"ms_per_step\": {:.3f}, \"tokens_per_s\": {:.1f}, "
        "\"forward_share\": {:.4f}, \"backward_share\": {:.4f}, \"optimizer_share\": {:.4f}, \"loss_first\": {:.5f}, "
        "\"loss_last\": {:.5f}, \"peak_mib\": {:.1f}, \"precision\": \"{}\", \"gemm\": \"{}\", "
        "\"activation_peak_mib\": {:.1f}}}\n",
        model.n_layer, model.n_embd, model.n_head, T, B, V, params, threads, warmup, steps, ms, tokens_per_s,
        sum_f / sum_all, sum_b / sum_all, sum_o / sum_all, loss_first, loss_last, peak_mib, precision, gemm,
        static_cast<double>(memory.stats().peak_of(tessera::MemoryTag::Activations)) / (1 << 20));
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "train_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
