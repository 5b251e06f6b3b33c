// Training throughput of tessera's GPT on this CPU: W warmup steps, then S timed steps of the
// trainer's step (the interpreter running forward and backward, then the AdamW update and zeroed
// gradients) on random tokens (fp32, GPT-2 style,
// tied embeddings, biases). Prints a short table and, last, one JSON line with tokens/s, the
// median step time and the share of time spent in forward, backward and the optimizer. Before
// that, its start line's `gemm:` (the GEMM library of each precision, and the warning when
// OpenBLAS runs a generic core) and, after the steps, the rate of the matmul the run's precision
// uses at the model's main product (the MLP's first linear: B*T x 4C x C), best of 5.
//
// The float products run on the library `tessera train` would choose (precision.f32_gemm; --f32-gemm).
//
//   train_bench --layers 4 --embd 256 --heads 4 --seq 128 --batch 8 --vocab 256 --steps 10
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "config/precision.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/cpu/matmul.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"
#include "train/float_gemm_choice.h"

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

// GFLOP/s of the matmul the run's precision uses (f32, or 16-bit T in and out) on out[M,N] = a[M,K] · b[K,N]:
// the best of 5 after one warm-up.
template <class T>
double matmul_gflops(int M, int N, int K) {
  std::vector<float> a32(static_cast<size_t>(M) * K), b32(static_cast<size_t>(K) * N);
  for (size_t i = 0; i < a32.size(); ++i) a32[i] = tessera::uniform(3, 1, i) - 0.5f;
  for (size_t i = 0; i < b32.size(); ++i) b32[i] = tessera::uniform(3, 2, i) - 0.5f;
  std::vector<T> a(a32.size()), b(b32.size()), c(static_cast<size_t>(M) * N);
  if constexpr (std::is_same_v<T, float>) {
    a = a32;
    b = b32;
  } else {
    auto narrow = [](float x) {
      if constexpr (std::is_same_v<T, tessera::bf16>) return tessera::to_bf16(x);
      else return tessera::to_f16(x);
    };
    for (size_t i = 0; i < a.size(); ++i) a[i] = narrow(a32[i]);
    for (size_t i = 0; i < b.size(); ++i) b[i] = narrow(b32[i]);
  }
  double best = 0;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = Clock::now();
    tessera::kernels::matmul<T, T>(c.data(), a.data(), b.data(), nullptr, M, N, K, tessera::kernels::Transpose::No,
                                   tessera::kernels::Transpose::No, false);
    if (r > 0) best = std::max(best, 2.0 * M * N * static_cast<double>(K) / seconds_between(t0, Clock::now()) / 1e9);
  }
  return best;
}

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
  std::string f32_gemm = "auto";
  app.add_option("--f32-gemm", f32_gemm, "the float matmuls' library: auto, onednn or openblas (precision.f32_gemm)");
  CLI11_PARSE(app, argc, argv);

  try {
    model.validate();
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);

    const int B = batch, T = model.seq_len, V = model.vocab_size;
    const auto mixed_dtype = tessera::config::parse_precision(precision, "--precision");
    const bool mixed = mixed_dtype != tessera::DType::F32;
    const std::optional<tessera::config::FloatGemmSetting> f32_setting =
        tessera::config::find_float_gemm_setting(f32_gemm);
    TS_CHECK(f32_setting.has_value(), "--f32-gemm {} is not known; use auto, onednn or openblas", f32_gemm);
    tessera::MemoryAccountant memory;
    tessera::nn::GPT gpt(model, memory, 1234);
    // The float products' library as `tessera train` chooses it, then its start line's GEMM libraries.
    const tessera::train::FloatGemmChoice f32_choice =
        tessera::train::choose_float_gemm(*f32_setting, tessera::train::model_gemm_problems(gpt, int64_t{B} * T),
                                          nullptr);
    fmt::print("gemm: {}\n", tessera::kernels::gemm_libraries(mixed ? tessera::kernels::half_gemm_description() : ""));
    fmt::print("f32 matmuls by {}: {}\n", tessera::kernels::float_gemm_name(f32_choice.chosen),
               f32_choice.reason);
    if (const auto warning = tessera::kernels::generic_openblas_core_warning(
            tessera::kernels::openblas_core(), tessera::kernels::detect_cpu_vector_features())) {
      fmt::print("{}\n", *warning);
    }
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

    // The rate of this run's matmul at the model's main product, after the steps (so it does not
    // warm the steps up): the library facts the benchmark scripts print for each contender.
    const int gm = B * T, gn = 4 * model.n_embd, gk = model.n_embd;
    const double gemm_gflops = mixed_dtype == tessera::DType::BF16  ? matmul_gflops<tessera::bf16>(gm, gn, gk)
                               : mixed_dtype == tessera::DType::F16 ? matmul_gflops<tessera::f16>(gm, gn, gk)
                                                                     : matmul_gflops<float>(gm, gn, gk);
    const std::string gemm = options.precision.mixed() ? tessera::kernels::half_gemm_description() : "sgemm";
    const std::string gemm_library = mixed ? gemm : std::string(tessera::kernels::float_gemm_name());
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
        "\"activation_peak_mib\": {:.1f}, \"gemm_library\": \"{}\", \"openblas_core\": \"{}\", \"gemm_shape\": "
        "\"{}x{}x{}\", \"gemm_gflops\": {:.1f}}}\n",
        model.n_layer, model.n_embd, model.n_head, T, B, V, params, threads, warmup, steps, ms, tokens_per_s,
        sum_f / sum_all, sum_b / sum_all, sum_o / sum_all, loss_first, loss_last, peak_mib, precision, gemm,
        static_cast<double>(memory.stats().peak_of(tessera::MemoryTag::Activations)) / (1 << 20), gemm_library,
        tessera::kernels::openblas_core(), gm, gn, gk, gemm_gflops);
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "train_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
