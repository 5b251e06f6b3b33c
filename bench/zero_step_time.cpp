// Step time of ZeRO-3 against plain data parallelism, and how much of DP's gradient all-reduce
// hides behind backward, for the GPT-2 124M shape under mpirun (dp = number of ranks, normally 2).
// Everything is measured in the same run, interleaved round by round; times are the slowest
// rank's, medians over --reps rounds.
//
//   step ratio   median ZeRO-3 step / median DP step (one microbatch each)
//   hidden       (t_backward + t_allreduce − t_both) / t_allreduce, where
//                  t_backward  backward of a microbatch that posts no reduction (an accumulation
//                              microbatch: same compute, no communication),
//                  t_both      backward of the last microbatch until every bucket is reduced,
//                  t_allreduce the same buckets all-reduced back to back with nothing else running
//                1: the all-reduce is entirely hidden; 0: it runs serially after backward.
//
//   mpirun -n 2 --bind-to none -x OMP_NUM_THREADS=1 zero_step_time [--tokens 128] [--reps 3]
//
// Prints a table and, last, one JSON line {"bench": "zero_step_time", ...}.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "dist/mpi_runtime.h"
#include "nn/gpt.h"
#include "parallel/training_engine.h"
#include "parallel/zero_memory.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest rank's value.
double slowest(dist::Communicator& comm, double seconds) {
  auto v = static_cast<float>(seconds);
  comm.all_reduce(std::span(&v, 1), dist::ReduceOp::Max)->wait();
  return v;
}

// When each microbatch's backward starts and ends, and when the program's reductions are all done,
// seen from the outermost slot of the transform chain.
class BackwardTimer final : public exec::Transform {
 public:
  std::string_view name() const override { return "backward timer"; }
  void begin(const exec::Program& program) override {
    start.assign(static_cast<size_t>(program.microbatches), Clock::time_point{});
    end = start;
  }
  void before(const exec::Event& e) override {
    auto& t = start[static_cast<size_t>(e.microbatch)];
    if (!exec::is_forward(e.phase) && t == Clock::time_point{}) t = Clock::now();
  }
  void after(const exec::Event& e) override {
    if (!exec::is_forward(e.phase)) end[static_cast<size_t>(e.microbatch)] = Clock::now();
  }
  void finish(const exec::Program&) override { finished = Clock::now(); }
  double seconds(Clock::time_point a, Clock::time_point b) const { return std::chrono::duration<double>(b - a).count(); }

  std::vector<Clock::time_point> start, end;
  Clock::time_point finished;
};

struct Setup {
  MemoryAccountant memory;
  nn::GPT model;
  dist::Mesh mesh;  // data parallel over the whole group it is given
  parallel::TrainingEngine engine;
  BackwardTimer timer;
  static parallel::EngineOptions options(int stage, int ranks, int tokens) {
    parallel::EngineOptions o;
    o.layout.dp = ranks;
    o.layout.zero_stage = stage;
    o.layout.global_batch = ranks;  // one sequence per rank
    o.seq_len = tokens;
    return o;
  }
  Setup(int stage, dist::Communicator& comm, int tokens)
      : model(config::gpt2_124m(), memory, 1),
        mesh(comm, options(stage, comm.size(), tokens).layout),
        engine(model, memory, &mesh, options(stage, comm.size(), tokens)) {
    engine.transforms().add(exec::TransformSlot::Observer, timer);
  }
  ~Setup() { engine.transforms().remove(exec::TransformSlot::Observer); }
};

struct Tokens {
  std::vector<int32_t> inputs, targets;
  Tokens(int n, int rank) : inputs(static_cast<size_t>(n)), targets(static_cast<size_t>(n)) {
    for (int t = 0; t < n; ++t) {
      inputs[static_cast<size_t>(t)] = (t * 7919 + rank * 31) % 50257;
      targets[static_cast<size_t>(t)] = (t * 104729 + rank) % 50257;
    }
  }
  exec::MicrobatchInput input() const {
    const int T = static_cast<int>(inputs.size());
    return {{nn::token_tensor(inputs.data(), 1, T), nn::token_tensor(targets.data(), 1, T), 1.0f / static_cast<float>(T)},
            0};
  }
};

double full_step(Setup& s, const Tokens& tok) {
  const exec::MicrobatchInput input = tok.input();
  const auto t0 = Clock::now();
  s.engine.train_step(std::span(&input, 1), {}, 1e-4f, 1.0);
  return since(t0);
}

// Two microbatches: the first backward posts no reduction (accumulation), the second posts every
// bucket. Returns the first's backward time and the second's backward until every bucket is reduced.
std::pair<double, double> accumulation_step(Setup& s, const Tokens& tok) {
  const std::vector<exec::MicrobatchInput> inputs{tok.input(), tok.input()};
  s.engine.set_microbatches(2);
  s.engine.train_step(inputs, {}, 1e-4f, 1.0);
  s.engine.set_microbatches(1);
  const BackwardTimer& t = s.timer;
  return {t.seconds(t.start[0], t.end[0]), t.seconds(t.start[1], t.finished)};
}

// The DP buckets all-reduced back to back, alone.
double all_reduce_alone(Setup& s, dist::Communicator& comm) {
  float* grads = s.model.parameters().flat_grads().data<float>();
  const auto t0 = Clock::now();
  std::vector<dist::WorkPtr> works;
  for (const parallel::Bucket& b : s.engine.data_parallel().buckets()) {
    works.push_back(comm.all_reduce(grads + b.range.begin, static_cast<size_t>(b.range.size()), DType::F32,
                                    dist::ReduceOp::Sum));
  }
  dist::wait_all(works);
  return since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 128, reps = 3;
  CLI::App app{"ZeRO-3 / DP step time and all-reduce overlap, GPT-2 124M"};
  app.add_option("--tokens", tokens, "tokens per rank per microbatch");
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);

  dist::MpiRuntime mpi(&argc, &argv);
  try {
    auto world = mpi.world();
    auto zero3_group = world->split(0, world->rank(), "dp-zero3");
    Setup dp(0, *world, tokens);
    Setup z3(3, *zero3_group, tokens);
    const Tokens tok(tokens, world->rank());
    std::vector<double> t_dp, t_z3, t_backward, t_both, t_comm;
    uint64_t bytes_dp = 0, bytes_z3 = 0;
    for (int r = 0; r < reps + 1; ++r) {  // round 0 warms up (page faults, caches) and is dropped
      // What each engine sends over its data-parallel group (the timing's all-reduce goes over the world).
      const uint64_t b0 = dp.mesh.dp().stats().bytes_sent, b3 = z3.mesh.dp().stats().bytes_sent;
      const double a = slowest(*world, full_step(dp, tok));
      bytes_dp = dp.mesh.dp().stats().bytes_sent - b0;
      const double b = slowest(*world, full_step(z3, tok));
      bytes_z3 = z3.mesh.dp().stats().bytes_sent - b3;
      const auto [backward, overlapped] = accumulation_step(dp, tok);
      const double alone = slowest(*world, backward);  // accumulation: no communication
      const double both = slowest(*world, overlapped);  // posts every bucket during backward
      const double comm = slowest(*world, all_reduce_alone(dp, *world));
      if (r == 0) continue;
      t_dp.push_back(a), t_z3.push_back(b), t_backward.push_back(alone), t_both.push_back(both), t_comm.push_back(comm);
    }
    const double hidden = (median(t_backward) + median(t_comm) - median(t_both)) / median(t_comm);
    if (world->rank() == 0) {
      const int64_t numel = dp.model.parameters().numel();
      const int n = world->size();
      fmt::print("GPT-2 124M ({} parameters), dp {}, {} tokens per rank per step, {} rounds (medians, slowest rank)\n\n",
                 numel, n, tokens, reps);
      fmt::print("| measure | value |\n|---|---|\n");
      fmt::print("| DP step | {:.3f} s |\n| ZeRO-3 step | {:.3f} s |\n| ratio ZeRO-3 / DP | {:.2f} |\n", median(t_dp),
                 median(t_z3), median(t_z3) / median(t_dp));
      fmt::print("| DP bytes sent per step | {} (theory {:.0f}) |\n| ZeRO-3 bytes sent per step | {} (theory {:.0f}; "
                 "+ tied embedding gathered twice more) |\n",
                 bytes_dp, parallel::zero_step_bytes(0, numel, n, 1), bytes_z3, parallel::zero_step_bytes(3, numel, n, 1));
      fmt::print("| backward alone | {:.3f} s |\n| all-reduce alone ({} buckets) | {:.3f} s |\n| backward + all-reduce, "
                 "overlapped | {:.3f} s |\n| all-reduce hidden behind backward | {:.0f} % |\n",
                 median(t_backward), dp.engine.data_parallel().buckets().size(), median(t_comm), median(t_both), 100 * hidden);
      nlohmann::json j = {{"bench", "zero_step_time"}, {"numel", numel}, {"dp", n}, {"tokens", tokens},
                          {"dp_step_s", median(t_dp)}, {"zero3_step_s", median(t_z3)},
                          {"ratio", median(t_z3) / median(t_dp)}, {"backward_s", median(t_backward)},
                          {"allreduce_s", median(t_comm)}, {"both_s", median(t_both)}, {"hidden_fraction", hidden},
                          {"bytes_dp", bytes_dp}, {"bytes_zero3", bytes_z3}};
      fmt::print("\n{}\n", j.dump());
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", mpi.world_rank(), e.what());
    mpi.abort_job(1);
  }
  return 0;
}
