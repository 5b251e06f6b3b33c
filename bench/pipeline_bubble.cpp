// The pipeline bubble as measured against the simulator fed the measured costs. Every rank of the
// job is one pipeline rank (dp 1): a GPT-2 is trained through parallel::TrainingEngine with the
// given schedule on synthetic tokens, every step recorded (exec/timeline_recorder.h), and each
// timed step's timeline compared with the simulation of the same schedule with that step's own
// per-stage medians and p2p time (plan/pipeline/measured_run.h, the definition of both bubbles).
//
//   mpirun -n 2 --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1
//     pipeline_bubble --schedule 1f1b --microbatches 8 [--chunks 2] [--timeline-out t.json]
//
// Prints one line per timed step — both bubbles, both step times (to the last compute instruction),
// and two measures of what the simulator does not model: the time receivers waited for data
// already sent (delivery), and how much slower compute runs while the other rank computes too
// (contention; 1 on independent cores) — then
//   RESULT pipeline schedule=S p=P m=M v=V measured_bubble=X simulated_bubble=Y
// for the step whose measured bubble is the median (its timeline goes to --timeline-out), and last
// one JSON line {"bench": "pipeline_bubble", ...} with every step.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <tuple>

#include "core/rng.h"
#include "dist/mpi_runtime.h"
#include "nn/gpt.h"
#include "schedule/measured_timeline.h"
#include "parallel/training_engine.h"
#include "plan/pipeline/measured_run.h"

using namespace tessera;

namespace {

struct Options {
  std::string schedule = "1f1b";
  int microbatches = 4;
  int chunks = 1;
  int layers = 8;
  int embd = 256;
  int heads = 4;
  int seq = 128;
  int vocab = 512;
  int micro_batch = 1;
  int warmup = 2;
  int steps = 5;
  std::string timeline_out;
};

// Tokens of microbatch m of a step: the same on every rank (each pipeline rank reads its own part).
struct Batch {
  std::vector<std::vector<int32_t>> inputs, targets;
  std::vector<exec::MicrobatchInput> microbatches;
  Batch(const Options& o, int step) {
    const int rows = o.micro_batch, T = o.seq;
    inputs.resize(static_cast<size_t>(o.microbatches));
    targets.resize(inputs.size());
    const float scale = 1.0f / static_cast<float>(o.microbatches * rows * T);
    for (int m = 0; m < o.microbatches; ++m) {
      auto& in = inputs[static_cast<size_t>(m)];
      auto& out = targets[static_cast<size_t>(m)];
      for (int i = 0; i < rows * T; ++i) {
        const uint64_t index = static_cast<uint64_t>((m * rows * T + i) * 2);
        in.push_back(static_cast<int32_t>(uniform(7, static_cast<uint64_t>(step), index) * static_cast<float>(o.vocab)));
        out.push_back(
            static_cast<int32_t>(uniform(7, static_cast<uint64_t>(step), index + 1) * static_cast<float>(o.vocab)));
      }
      microbatches.push_back(
          {{nn::token_tensor(in.data(), rows, T), nn::token_tensor(out.data(), rows, T), scale}, int64_t{m} * rows});
    }
  }
};

struct StepResult {
  double measured = 0, simulated = 0, total = 0, simulated_total = 0;
  double delivery_wait = 0;  // seconds, all ranks
  double contention = 0;     // 0: not measurable in this step
  pipeline::MeasuredTimeline timeline;
};

bool busy(pipeline::Op op) { return pipeline::is_compute(op) && op != pipeline::Op::OptimizerStep; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Time the receivers stood waiting after the data had been sent: max(0, end of the receive − the
// later of its start and its send's start), summed over every transfer. What the simulator
// charges for this is one p2p time per exposed transfer.
double delivery_wait(const pipeline::MeasuredTimeline& t) {
  double total = 0;
  for (const auto& records : t.records) {
    for (const pipeline::MeasuredInstruction& m : records) {
      if (m.op != pipeline::Op::Recv) continue;
      for (const pipeline::MeasuredInstruction& s : t.records[static_cast<size_t>(m.peer)]) {
        if (s.op == pipeline::Op::Send && s.microbatch == m.microbatch && s.tensor == m.tensor &&
            pipeline::transfer_edge(pipeline::instruction_of(s)) == pipeline::transfer_edge(pipeline::instruction_of(m))) {
          total += std::max(0.0, m.end - std::max(m.start, s.start));
        }
      }
    }
  }
  return total;
}

// How much slower compute runs while another rank computes too: per (rank, op, stage), the median
// time of instructions that overlapped another rank's compute for over 80 % of their span, over
// the median of those that overlapped it for under 20 %; the median of those ratios (0 when no
// kind of instruction ran both ways). The simulator takes one cost per stage whatever runs beside.
double contention(const pipeline::MeasuredTimeline& t) {
  std::map<std::tuple<size_t, int, int>, std::pair<std::vector<double>, std::vector<double>>> samples;
  for (size_t r = 0; r < t.records.size(); ++r) {
    for (const pipeline::MeasuredInstruction& m : t.records[r]) {
      if (!busy(m.op) || m.end <= m.start) continue;
      double overlap = 0;
      for (size_t q = 0; q < t.records.size(); ++q) {
        if (q == r) continue;
        for (const pipeline::MeasuredInstruction& o : t.records[q]) {
          if (busy(o.op)) overlap += std::max(0.0, std::min(m.end, o.end) - std::max(m.start, o.start));
        }
      }
      const double share = overlap / (m.end - m.start);
      auto& [alone, together] = samples[{r, static_cast<int>(m.op), m.stage}];
      if (share < 0.2) alone.push_back(m.end - m.start);
      if (share > 0.8) together.push_back(m.end - m.start);
    }
  }
  std::vector<double> ratios;
  for (const auto& [key, both] : samples) {
    if (!both.first.empty() && !both.second.empty()) ratios.push_back(median(both.second) / median(both.first));
  }
  return median(ratios);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Measured pipeline bubble against the simulator with the measured costs (run under mpirun)"};
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved or zb-h1")->capture_default_str();
  app.add_option("--microbatches,-m", o.microbatches)->capture_default_str();
  app.add_option("--chunks", o.chunks, "model chunks per rank (interleaved)")->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--embd", o.embd)->capture_default_str();
  app.add_option("--heads", o.heads)->capture_default_str();
  app.add_option("--seq", o.seq)->capture_default_str();
  app.add_option("--vocab", o.vocab)->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "sequences per microbatch")->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps run first and not counted")->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str();
  app.add_option("--timeline-out", o.timeline_out, "write the median step's timeline.json here");
  CLI11_PARSE(app, argc, argv);

  dist::MpiRuntime mpi(&argc, &argv);
  try {
    auto world = mpi.world();
    const int p = world->size();
    config::ModelConfig model_config;
    model_config.arch = config::Architecture::Gpt2;
    model_config.n_layer = o.layers;
    model_config.n_head = o.heads;
    model_config.n_embd = o.embd;
    model_config.vocab_size = o.vocab;
    model_config.seq_len = o.seq;
    MemoryAccountant memory;
    nn::GPT model(model_config, memory, 1);
    parallel::EngineOptions options;
    options.layout.pp = p;
    options.layout.schedule = config::parse_schedule_kind(o.schedule);
    options.layout.virtual_stages = o.chunks;
    options.layout.micro_batch = o.micro_batch;
    options.layout.global_batch = int64_t{o.microbatches} * o.micro_batch;
    options.seq_len = o.seq;
    options.measure_unit_times = false;
    const dist::Mesh mesh(*world, options.layout);
    parallel::TrainingEngine engine(model, memory, &mesh, options);

    std::vector<StepResult> results;
    exec::TimelineRecorder recorder;
    for (int step = 0; step < o.warmup + o.steps; ++step) {
      const Batch batch(o, step);
      engine.train_step(batch.microbatches, {1, static_cast<uint64_t>(step), &recorder}, 1e-4f, 1.0);
      pipeline::MeasuredTimeline timeline = engine.measured_timeline(recorder);  // collective
      if (step < o.warmup) continue;
      const plan::MeasuredComparison c = plan::compare_with_simulation(timeline);
      results.push_back({c.measured.fraction, c.simulated.bubble_fraction, c.measured.total, c.simulated.total_time,
                         delivery_wait(timeline), contention(timeline), std::move(timeline)});
    }
    if (world->rank() == 0) {
      const pipeline::Schedule& schedule = engine.schedule();
      fmt::print("{}: p = {}, m = {}, v = {}; GPT-2 L = {}, C = {}, T = {}, b = {}, V = {}; {} thread(s) per rank\n",
                 config::schedule_title(schedule.kind), p, o.microbatches, o.chunks, o.layers, o.embd, o.seq,
                 o.micro_batch, o.vocab, omp_get_max_threads());
      fmt::print("{:>4}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}  {:>13}  {:>10}\n", "step", "measured", "simulated",
                 "relative", "ms meas.", "ms sim.", "delivery ms", "contention");
      nlohmann::json steps = nlohmann::json::array();
      for (size_t i = 0; i < results.size(); ++i) {
        const StepResult& r = results[i];
        fmt::print("{:>4}  {:>10.4f}  {:>10.4f}  {:>+8.1f}%  {:>9.1f}  {:>9.1f}  {:>13.1f}  {:>10.2f}\n", i + 1,
                   r.measured, r.simulated, 100 * (r.measured / r.simulated - 1), 1000 * r.total,
                   1000 * r.simulated_total, 1000 * r.delivery_wait, r.contention);
        steps.push_back({{"measured_bubble", r.measured}, {"simulated_bubble", r.simulated}, {"total_s", r.total},
                         {"simulated_total_s", r.simulated_total}, {"delivery_wait_s", r.delivery_wait},
                         {"contention", r.contention}});
      }
      std::vector<size_t> order(results.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return results[a].measured < results[b].measured; });
      const StepResult& median = results[order[order.size() / 2]];
      if (!o.timeline_out.empty()) pipeline::write_measured_timeline(median.timeline, o.timeline_out);
      fmt::print("RESULT pipeline schedule={} p={} m={} v={} measured_bubble={:.4f} simulated_bubble={:.4f}\n",
                 config::schedule_name(schedule.kind), p, o.microbatches, o.chunks, median.measured, median.simulated);
      const nlohmann::json j = {{"bench", "pipeline_bubble"}, {"schedule", config::schedule_name(schedule.kind)},
                                {"p", p}, {"m", o.microbatches}, {"v", o.chunks}, {"layers", o.layers},
                                {"embd", o.embd}, {"seq", o.seq}, {"micro_batch", o.micro_batch},
                                {"threads", omp_get_max_threads()}, {"steps", steps},
                                {"median_measured_bubble", median.measured},
                                {"median_simulated_bubble", median.simulated}};
      fmt::print("{}\n", j.dump());
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", mpi.world_rank(), e.what());
    mpi.abort_job(1);
  }
  return 0;
}
