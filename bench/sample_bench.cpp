// Text generation with and without the key/value cache, on one model shape (default: the shape of
// configs/default.toml with a 4096-token vocabulary). Each run generates --tokens tokens from a
// one-token prompt with temperature 0.8 and top-k 40, three ways, in one process:
//   kv cache      what `tessera sample` does: decoding with the cache, the context halved past seq_len
//   no cache      the same tokens (the run fails if they differ) by rerunning the context per token
//   before        the sampler before the cache: the context rerun per token, always the last
//                 seq_len tokens (window "slide")
// Runs alternate the three and the medians are compared. Prints a table for people and, last, one
// JSON line. CPU seconds count every thread of the process.
//
//   sample_bench                                  # gpt2, L=4 C=256 H=4 T=128 V=4096, 200 tokens, 5 runs
//   sample_bench --arch llama --runs 3
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "nn/gpt.h"
#include "train/sampler.h"

using namespace tessera;

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Mode {
  const char* name;
  bool kv_cache;
  train::ContextWindow window;
  std::vector<double> wall, cpu;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sample_bench: generation with and without the key/value cache"};
  config::ModelConfig c;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 256;
  c.seq_len = 128;
  c.vocab_size = 4096;
  std::string arch = "gpt2";
  int tokens = 200, runs = 5;
  bool cached_only = false;
  app.add_option("--arch", arch, "gpt2 or llama")->capture_default_str();
  app.add_option("--layers", c.n_layer)->capture_default_str();
  app.add_option("--heads", c.n_head)->capture_default_str();
  app.add_option("--embd", c.n_embd)->capture_default_str();
  app.add_option("--seq", c.seq_len)->capture_default_str();
  app.add_option("--vocab", c.vocab_size)->capture_default_str();
  app.add_option("--tokens", tokens, "tokens generated per run")->capture_default_str();
  app.add_option("--runs", runs, "runs of each (alternating)")->capture_default_str();
  app.add_flag("--cached-only", cached_only, "only the cached generation (for profiling it)");
  CLI11_PARSE(app, argc, argv);
  if (arch == "llama") {
    c.arch = config::Architecture::Llama;
    c.bias = false;
  } else if (arch != "gpt2") {
    fmt::print(stderr, "--arch must be gpt2 or llama, got {}\n", arch);
    return 2;
  }

  try {
    MemoryAccountant memory;
    nn::GPT model(c, memory, 1337);
    fmt::print("sample_bench: {} L={} C={} H={} T={} V={}, {} parameters; {} tokens from a 1-token prompt, {} runs\n",
               arch, c.n_layer, c.n_embd, c.n_head, c.seq_len, c.vocab_size, model.parameters().numel(), tokens, runs);
    std::vector<Mode> modes = {{"kv cache", true, train::ContextWindow::Halve, {}, {}},
                               {"no cache (same tokens)", false, train::ContextWindow::Halve, {}, {}},
                               {"before the cache (window slide)", false, train::ContextWindow::Slide, {}, {}}};
    if (cached_only) modes.resize(1);
    bool same = true;
    for (int r = 0; r < runs; ++r) {
      std::vector<std::vector<int32_t>> out;
      for (Mode& m : modes) {
        train::SamplingOptions o;
        o.max_new_tokens = tokens;
        o.seed = static_cast<uint64_t>(r);
        o.kv_cache = m.kv_cache;
        o.window = m.window;
        const double c0 = cpu_seconds();
        const auto t0 = Clock::now();
        out.push_back(train::generate(model, memory, model.parameters(), {1}, o));
        m.wall.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        m.cpu.push_back(cpu_seconds() - c0);
      }
      same = same && (out.size() < 2 || out[0] == out[1]);
    }
    fmt::print("\n| generation | runs | median wall s | median CPU s | tokens/s (wall) | speedup of the cache (wall, CPU) |\n"
               "|---|---|---|---|---|---|\n");
    for (const Mode& m : modes) {
      fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.1f} | {:.1f}x, {:.1f}x |\n", m.name, runs, median(m.wall),
                 median(m.cpu), tokens / median(m.wall), median(m.wall) / median(modes[0].wall),
                 median(m.cpu) / median(modes[0].cpu));
    }
    nlohmann::json j = {{"arch", arch}, {"layers", c.n_layer}, {"embd", c.n_embd}, {"heads", c.n_head},
                        {"seq", c.seq_len}, {"vocab", c.vocab_size}, {"tokens", tokens}, {"runs", runs},
                        {"same_tokens", same}};
    for (const Mode& m : modes) {
      j["modes"][m.name] = {{"wall_s", median(m.wall)}, {"cpu_s", median(m.cpu)},
                            {"speedup_wall", median(m.wall) / median(modes[0].wall)},
                            {"speedup_cpu", median(m.cpu) / median(modes[0].cpu)}};
    }
    fmt::print("\nsame tokens with and without the cache: {}\n{}\n", same ? "yes" : "NO", j.dump());
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
