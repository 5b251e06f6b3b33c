// Activation checkpointing on this CPU: one recompute policy per process (bench/recompute.sh
// alternates them), W warmup steps, then S timed steps of the training engine's step on random
// tokens (fp32, AdamW, GPT-2 style). Each step's activation peak is the allocator's, measured
// from reset_peaks() to the end of the step, and is printed beside the engine's prediction; the
// two must be equal, so the run fails when they are not.
//
//   recompute_bench --layers 4 --embd 256 --heads 4 --seq 128 --batch 8 --vocab 256 --policy full
//   recompute_bench --gpt2-124m --seq 256 --batch 2 --policy optimal:805306368
//   recompute_bench ... --predict none,full,every_k,every_k:2,selective   (predictions only, no steps)
//   recompute_bench --gpt2-124m --seq 256 --batch 4 --predict optimal:B,dtr:B,checkmate:B   (at one budget)
//   recompute_bench --chart summary.json --svg recompute.svg              (the step/memory chart)
//
// Policies: none, full, selective, every_k (k = ⌈√L⌉), every_k:<k>, optimal:<budget bytes>,
// dtr:<budget bytes>. A run prints a line for people and, last, one JSON line. A prediction also
// prints the FLOP model's step time relative to none's (the simulator's, no step run), which is how
// DTR's extra compute is compared with optimal's on a machine too busy to time them.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/rng.h"
#include "io/loss_chart.h"
#include "memory/chain.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"

extern "C" void openblas_set_num_threads(int);

using namespace tessera;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Recomputing forwards are timed apart from first forwards: "full costs one extra forward" is a
// claim about exactly that time.
class PhaseTimer final : public exec::Transform {
 public:
  std::string_view name() const override { return "phase timer"; }
  void before(const exec::Event&) override { start_ = Clock::now(); }
  void after(const exec::Event& e) override {
    const double s = seconds_between(start_, Clock::now());
    if (e.phase == exec::Phase::Recompute) {
      recompute += s;
    } else if (exec::is_forward(e.phase)) {
      forward += s;
    } else {
      backward += s;
    }
  }
  void reset() { forward = recompute = backward = 0; }
  double forward = 0, recompute = 0, backward = 0;

 private:
  Clock::time_point start_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mib(double bytes) { return bytes / 1048576.0; }

struct PolicySpec {
  std::string name;  // as the results name it: every_k:2, optimal:812.0 (MiB)
  exec::RecomputeOptions options;
};

PolicySpec parse_policy(const std::string& spec, int n_layer) {
  PolicySpec p;
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  p.options.policy = config::parse_recompute_policy(base);
  p.name = base;
  if (p.options.policy == config::RecomputePolicy::EveryK && !arg.empty()) {
    p.options.every_k = std::stoi(arg);
    TS_CHECK(p.options.every_k >= 1, "every_k:{}: k must be at least 1", arg);
    // The default k keeps the plain name, so "every_k" means the same run however it was asked.
    if (p.options.every_k != config::default_every_k(n_layer)) p.name = spec;
  } else if (config::recompute_takes_budget(p.options.policy)) {
    TS_CHECK(!arg.empty(), "{} needs a budget: {}:<bytes per microbatch>", base, base);
    p.options.budget_bytes = std::stoll(arg);
    p.name = fmt::format("{}:{:.1f}", base, mib(static_cast<double>(p.options.budget_bytes)));
  } else {
    TS_CHECK(arg.empty(), "policy '{}' takes no argument", spec);
  }
  return p;
}

parallel::EngineOptions engine_options(int B, int T, const exec::RecomputeOptions& recompute) {
  parallel::EngineOptions options;
  options.optimizer = {};  // AdamW: beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
  options.layout.micro_batch = B;
  options.layout.global_batch = B;
  options.seq_len = T;
  options.recompute = recompute;
  return options;
}

// The chain's time under FLOP-proportional unit times (backward = 2 × forward), relative to
// keeping everything: what the cost model expects the recomputation to cost, embedding and
// optimizer aside. Selective's rebuilding inside the backward is not in the chain's time.
double model_time_ratio(const nn::GPT& model, const exec::StagePlan& plan, int B, int T) {
  const exec::StagePlan::Stage& stage = plan.stages.front();
  const exec::UnitTimes times = exec::nominal_unit_times(model.config(), B, T);
  const std::vector<memory::ChainUnit> chain = exec::stage_chain(model.config(), stage, B, T, stage.selective, times);
  const double with = memory::simulate(chain, stage.recompute).time;
  const double without = memory::simulate(chain, memory::none_schedule(static_cast<int>(chain.size()))).time;
  return with / without;
}

nlohmann::json shape_json(const config::ModelConfig& m, int B, int T, int64_t params) {
  return {{"L", m.n_layer}, {"C", m.n_embd}, {"H", m.n_head}, {"T", T}, {"B", B}, {"V", m.vocab_size},
          {"params", params}};
}

int predict(const config::ModelConfig& model_config, int B, int T, const std::vector<std::string>& specs) {
  MemoryAccountant memory;
  nn::GPT gpt(model_config, memory, 1234);
  nlohmann::json out = shape_json(model_config, B, T, gpt.parameters().numel());
  out["bench"] = "recompute_predict";
  out["predicted"] = nlohmann::json::object();
  out["model_time_ratio"] = nlohmann::json::object();
  for (const std::string& spec : specs) {
    const PolicySpec p = parse_policy(spec, model_config.n_layer);
    parallel::EngineOptions options = engine_options(B, T, p.options);
    options.measure_unit_times = false;  // a prediction needs no timing: peaks do not depend on it
    parallel::TrainingEngine engine(gpt, memory, nullptr, options);
    const int64_t predicted = engine.predicted_activation_peak();
    const double modelled = model_time_ratio(gpt, engine.stages(), B, T);
    fmt::print("{:12s} predicted activation peak {:10.2f} MiB ({} bytes), FLOP-model time {:.4f} × none's\n", p.name,
               mib(static_cast<double>(predicted)), predicted, modelled);
    out["predicted"][p.name] = predicted;
    out["model_time_ratio"][p.name] = modelled;
    if (const auto& c = engine.stages().stages.front().checkmate) {
      out["checkmate"][p.name] = {{"status", memory::remat::solve_status_name(c->status)},
                                  {"source", memory::remat::chain_plan_source_name(c->source)},
                                  {"solve_seconds", c->solve_seconds}};
    }
  }
  fmt::print("{}\n", out.dump());
  return 0;
}

int run(const config::ModelConfig& model_config, int B, int T, const std::string& spec, int warmup, int steps,
        int threads, float lr) {
  const PolicySpec p = parse_policy(spec, model_config.n_layer);
  const int V = model_config.vocab_size;
  MemoryAccountant memory;
  nn::GPT gpt(model_config, memory, 1234);
  const auto t_build = Clock::now();
  parallel::TrainingEngine engine(gpt, memory, nullptr, engine_options(B, T, p.options));
  const double plan_seconds = seconds_between(t_build, Clock::now());
  const int64_t predicted = engine.predicted_activation_peak();
  int recomputes = 0;
  for (const exec::Action& a : engine.program().actions) recomputes += a.phase == exec::Phase::Recompute;
  const double modelled = model_time_ratio(gpt, engine.stages(), B, T);
  PhaseTimer timer;
  engine.transforms().add(exec::TransformSlot::Observer, timer);

  // The same random tokens for every policy (a different batch each step), so the losses of all
  // policies must agree: recomputation changes when values are computed, not what they are.
  const int total = warmup + steps;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(total)), targets(static_cast<size_t>(total));
  for (int s = 0; s < total; ++s) {
    for (int i = 0; i < B * T + 1; ++i) {
      tokens[s].push_back(
          static_cast<int32_t>(uniform(7, static_cast<uint64_t>(s), static_cast<uint64_t>(i)) * static_cast<float>(V)));
    }
    targets[s].assign(tokens[s].begin() + 1, tokens[s].end());
    tokens[s].pop_back();
  }

  std::vector<double> step_s, forward_s, recompute_s, backward_s, optimizer_s, losses;
  std::vector<int64_t> peaks;
  for (int s = 0; s < total; ++s) {
    const exec::MicrobatchInput input{
        {nn::token_tensor(tokens[s].data(), B, T), nn::token_tensor(targets[s].data(), B, T), 1.0f / static_cast<float>(B * T)},
        0};
    timer.reset();
    memory.reset_peaks();
    const auto t0 = Clock::now();
    const auto result = engine.train_step(std::span(&input, 1), {1234, static_cast<uint64_t>(s)}, lr, std::nullopt);
    const auto t1 = Clock::now();
    // Every step, warmup included, must peak where the plan says.
    peaks.push_back(static_cast<int64_t>(memory.stats().peak_of(MemoryTag::Activations)));
    losses.push_back(result.loss_sum / (B * T));
    if (s < warmup) continue;
    const double step_seconds = seconds_between(t0, t1);
    step_s.push_back(step_seconds);
    forward_s.push_back(timer.forward);
    recompute_s.push_back(timer.recompute);
    backward_s.push_back(timer.backward);
    optimizer_s.push_back(step_seconds - timer.forward - timer.recompute - timer.backward);
  }
  engine.transforms().remove(exec::TransformSlot::Observer);

  const auto [lo, hi] = std::minmax_element(peaks.begin(), peaks.end());
  const bool exact = *lo == predicted && *hi == predicted;
  const double ms = 1e3 * median(step_s);
  fmt::print("{:14s} {:9.1f} ms/step (fwd {:.1f}, recompute {:.1f}, bwd {:.1f}, opt {:.1f}); activations {:.2f} MiB "
             "measured, {:.2f} predicted{}; {} recomputed unit forwards; loss {:.6f}\n",
             p.name, ms, 1e3 * median(forward_s), 1e3 * median(recompute_s), 1e3 * median(backward_s),
             1e3 * median(optimizer_s), mib(static_cast<double>(*hi)), mib(static_cast<double>(predicted)),
             exact ? "" : " (NOT EQUAL)", recomputes, losses.back());
  nlohmann::json out = shape_json(model_config, B, T, gpt.parameters().numel());
  out.update({{"bench", "recompute"},
              {"policy", p.name},
              {"every_k", p.options.every_k},
              {"budget_bytes", p.options.budget_bytes},
              {"threads", threads},
              {"warmup", warmup},
              {"steps", steps},
              {"ms_per_step", ms},
              {"forward_ms", 1e3 * median(forward_s)},
              {"recompute_ms", 1e3 * median(recompute_s)},
              {"backward_ms", 1e3 * median(backward_s)},
              {"optimizer_ms", 1e3 * median(optimizer_s)},
              {"step_ms_all", step_s},
              {"plan_s", plan_seconds},
              {"recomputed_forwards", recomputes},
              {"model_time_ratio", modelled},
              {"activation_peak", *hi},
              {"activation_peak_min", *lo},
              {"predicted_peak", predicted},
              {"measured_equals_predicted", exact},
              {"losses", losses}});
  fmt::print("{}\n", out.dump());
  return exact ? 0 : 3;
}

// The summary recompute.sh writes: {"configs": {name: {policy: {"step_ratio", "activation_ratio"}}}}.
int chart(const std::string& summary_path, const std::string& svg_path) {
  std::ifstream in(summary_path);
  TS_CHECK(in.good(), "cannot open {}", summary_path);
  const nlohmann::json summary = nlohmann::json::parse(in);
  io::ChartSpec spec;
  spec.title = "Activation checkpointing: step time vs activation peak (ratios to none)";
  spec.x_label = "activation peak ÷ none's";
  spec.y_label = "step time ÷ none's";
  spec.width = 760;
  spec.height = 460;
  // One colour family per config: the every-k family (none, each k, full) as one line, optimal's
  // points as another, DTR's as a third, selective alone.
  const std::vector<std::array<const char*, 4>> colors{{"#1f77b4", "#2ca02c", "#9467bd", "#17becf"},
                                                       {"#d62728", "#ff7f0e", "#8c564b", "#e377c2"}};
  size_t c = 0;
  for (const auto& [config, policies] : summary.at("configs").items()) {
    const auto& color = colors[c++ % colors.size()];
    std::vector<std::pair<double, double>> curve, optimal, dtr;
    io::Series selective{config + " selective", color[2], {}, {}, true};
    for (const auto& [name, r] : policies.items()) {
      const std::pair<double, double> point{r.at("activation_ratio").get<double>(), r.at("step_ratio").get<double>()};
      if (name.rfind("optimal", 0) == 0) {
        optimal.push_back(point);
      } else if (name.rfind("dtr", 0) == 0) {
        dtr.push_back(point);
      } else if (name == "selective") {
        selective.x.push_back(point.first);
        selective.y.push_back(point.second);
      } else {
        curve.push_back(point);
      }
    }
    // Short labels: the legend has about 150 pixels.
    for (auto [points, label, col] : {std::tuple{&curve, " every_k", color[0]}, std::tuple{&optimal, " optimal", color[1]},
                                      std::tuple{&dtr, " dtr", color[3]}}) {
      if (points->empty()) continue;
      std::sort(points->begin(), points->end());
      io::Series s{config + label, col, {}, {}, true};
      for (const auto& [x, y] : *points) {
        s.x.push_back(x);
        s.y.push_back(y);
      }
      spec.series.push_back(s);
    }
    spec.series.push_back(selective);
  }
  write_file_atomically(svg_path, io::render_chart_svg(spec));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  config::ModelConfig model;
  model.arch = config::Architecture::Gpt2;
  model.bias = true;
  model.tied_embeddings = true;
  bool gpt2_124m = false;
  int batch = 8, seq = 128, warmup = 2, steps = 10, threads = 2;
  float lr = 3e-4f;
  std::string policy = "none", predict_list, chart_in, svg_out;
  CLI::App app{"tessera activation checkpointing: step time and activation peak of one recompute policy"};
  app.add_option("--layers", model.n_layer, "L")->check(CLI::PositiveNumber);
  app.add_option("--embd", model.n_embd, "C")->check(CLI::PositiveNumber);
  app.add_option("--heads", model.n_head, "H")->check(CLI::PositiveNumber);
  app.add_option("--vocab", model.vocab_size, "V")->check(CLI::PositiveNumber);
  app.add_flag("--gpt2-124m", gpt2_124m, "the GPT-2 124M model (config::gpt2_124m(), context 1024) instead");
  app.add_option("--seq", seq, "T of each step")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "B")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "OpenMP and OpenBLAS threads")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "AdamW learning rate");
  app.add_option("--policy", policy,
                 "none, full, selective, every_k, every_k:<k>, optimal:<budget bytes>, dtr:<budget bytes>, "
                 "checkmate:<budget bytes>");
  app.add_option("--predict", predict_list, "comma-separated policies: print their predicted peaks, run nothing");
  app.add_option("--chart", chart_in, "summary JSON written by bench/recompute.sh");
  app.add_option("--svg", svg_out, "where --chart draws");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!chart_in.empty()) {
      TS_CHECK(!svg_out.empty(), "--chart needs --svg");
      return chart(chart_in, svg_out);
    }
    if (gpt2_124m) model = config::gpt2_124m();
    else model.seq_len = seq;
    model.validate();
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    if (!predict_list.empty()) {
      std::vector<std::string> specs;
      std::stringstream ss(predict_list);
      for (std::string s; std::getline(ss, s, ',');) specs.push_back(s);
      return predict(model, batch, seq, specs);
    }
    return run(model, batch, seq, policy, warmup, steps, threads, lr);
  } catch (const Error& e) {
    fmt::print(stderr, "recompute_bench: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "recompute_bench: {}\n", e.what());
    return 1;
  }
}
