#include "plan/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"
#include "schedule/validator.h"

namespace tessera::plan {

PipelineCosts uniform_costs(const pipeline::Schedule& schedule, double forward, double backward, double weight, double p2p) {
  const auto stages = static_cast<std::size_t>(schedule.stages());
  const double v = schedule.chunks;
  PipelineCosts c;
  c.forward.assign(stages, forward / v);
  c.backward.assign(stages, backward / v);
  c.weight.assign(stages, weight / v);
  c.recompute.assign(stages, forward / v);
  c.activation.assign(stages, 1.0 / v);
  c.p2p = p2p;
  return c;
}

namespace {

using pipeline::Instruction;
using pipeline::Op;
using pipeline::Tensor;

void check_costs(const pipeline::Schedule& s, const PipelineCosts& c) {
  const auto stages = static_cast<std::size_t>(s.stages());
  const auto check_vector = [&](const std::vector<double>& values, const char* name) {
    TS_CHECK(values.size() == stages, "pipeline costs: '{}' has {} entries but the schedule has {} stages", name,
             values.size(), stages);
    for (std::size_t i = 0; i < values.size(); ++i)
      TS_CHECK(std::isfinite(values[i]) && values[i] >= 0, "pipeline costs: {}[{}] = {} must be finite and >= 0",
               name, i, values[i]);
  };
  check_vector(c.forward, "forward");
  check_vector(c.backward, "backward");
  check_vector(c.weight, "weight");
  check_vector(c.recompute, "recompute");
  check_vector(c.activation, "activation");
  for (std::size_t i = 0; i < stages; ++i)
    TS_CHECK(c.weight[i] <= c.backward[i],
             "pipeline costs: weight-gradient time {} of stage {} exceeds the whole backward time {}; backward is "
             "input gradient plus weight gradient",
             c.weight[i], i, c.backward[i]);
  TS_CHECK(std::isfinite(c.p2p) && c.p2p >= 0, "pipeline costs: p2p time {} must be finite and >= 0", c.p2p);
  TS_CHECK(std::isfinite(c.optimizer) && c.optimizer >= 0, "pipeline costs: optimizer time {} must be >= 0",
           c.optimizer);
  TS_CHECK(c.stashed_fraction >= 0 && c.stashed_fraction <= 1, "pipeline costs: stashed_fraction {} must be in [0, 1]",
           c.stashed_fraction);
}

double compute_cost(const Instruction& ins, const PipelineCosts& c) {
  const auto s = static_cast<std::size_t>(ins.stage);
  switch (ins.op) {
    case Op::Forward: return c.forward[s];
    case Op::Backward: return c.backward[s];
    case Op::BackwardInput: return c.backward[s] - c.weight[s];
    case Op::BackwardWeight: return c.weight[s];
    case Op::Recompute: return c.recompute[s];
    case Op::OptimizerStep: return c.optimizer;
    default: return 0.0;
  }
}

class Simulator {
 public:
  Simulator(const pipeline::Schedule& s, const PipelineCosts& c)
      : s_(s),
        c_(c),
        mbs_(s.total_microbatches()),
        posted_send_(2 * static_cast<std::size_t>(s.stages()) * mbs_, kUnknown),
        posted_recv_(posted_send_.size(), kUnknown) {}

  SimulationResult run() {
    const int p = s_.ranks;
    result_.timeline.resize(p);
    for (int r = 0; r < p; ++r) result_.timeline[r].resize(s_.programs[r].size());
    std::vector<std::size_t> pc(p, 0);
    std::vector<double> clock(p, 0.0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < p; ++r)
        while (pc[r] < s_.programs[r].size() && step(r, pc, clock)) progress = true;
    }
    std::string stuck;
    for (int r = 0; r < p; ++r)
      if (pc[r] < s_.programs[r].size())
        stuck += fmt::format("; rank {} waits forever at #{} ({})", r, pc[r], pipeline::describe(s_.programs[r][pc[r]]));
    TS_CHECK(stuck.empty(), "pipeline simulation cannot continue{}; validate the schedule to see why", stuck);
    summarize();
    return std::move(result_);
  }

 private:
  static constexpr double kUnknown = -1.0;
  const pipeline::Schedule& s_;
  const PipelineCosts& c_;
  int mbs_;
  std::vector<double> posted_send_, posted_recv_;  // [transfer key]: when each half was posted
  SimulationResult result_;

  std::size_t key(Tensor tensor, int edge, int mb) const {
    const std::size_t half = posted_send_.size() / 2;
    return (tensor == Tensor::Gradient ? half : 0) + static_cast<std::size_t>(edge) * mbs_ + mb;
  }

  // When the remote tensor a compute instruction consumes is available (0 when it needs none),
  // or kUnknown while its sender has not posted it yet.
  double input_ready(const Instruction& ins, int r) const {
    std::size_t k = 0;
    if (ins.op == Op::Forward && ins.stage > 0 && s_.rank_of_stage(ins.stage - 1) != r)
      k = key(Tensor::Activation, ins.stage - 1, ins.microbatch);
    else if ((ins.op == Op::Backward || ins.op == Op::BackwardInput) && ins.stage + 1 < s_.stages() &&
             s_.rank_of_stage(ins.stage + 1) != r)
      k = key(Tensor::Gradient, ins.stage, ins.microbatch);
    else
      return 0.0;
    if (posted_send_[k] == kUnknown) return kUnknown;
    return std::max(posted_send_[k], posted_recv_[k] == kUnknown ? posted_send_[k] : posted_recv_[k]) + c_.p2p;
  }

  // Runs rank r's next instruction if it can; false when it must wait for another rank.
  bool step(int r, std::vector<std::size_t>& pc, std::vector<double>& clock) {
    const Instruction& ins = s_.programs[r][pc[r]];
    TimedInstruction& t = result_.timeline[r][pc[r]];
    t.index = pc[r];
    if (pipeline::is_compute(ins.op)) {
      double ready = clock[r];
      if (c_.mode == TransferMode::Async) {
        const double input = input_ready(ins, r);
        if (input == kUnknown) return false;
        ready = std::max(ready, input);
      }
      t.start = ready;
      t.end = ready + compute_cost(ins, c_);
      clock[r] = t.end;
      ++pc[r];
      return true;
    }
    const std::size_t k = key(ins.tensor, pipeline::transfer_edge(ins), ins.microbatch);
    if (c_.mode == TransferMode::Async) {
      (ins.op == Op::Send ? posted_send_ : posted_recv_)[k] = clock[r];
      t.start = t.end = clock[r];
      ++pc[r];
      return true;
    }
    const int q = ins.peer;
    if (pc[q] >= s_.programs[q].size()) return false;
    const Instruction& other = s_.programs[q][pc[q]];
    if (other.op == ins.op || !pipeline::is_transfer(other.op) || other.tensor != ins.tensor ||
        other.microbatch != ins.microbatch || other.peer != r || pipeline::transfer_edge(other) != pipeline::transfer_edge(ins))
      return false;
    const double start = std::max(clock[r], clock[q]);
    t.start = start;
    t.end = start + c_.p2p;
    result_.timeline[q][pc[q]] = {pc[q], start, start + c_.p2p};
    clock[r] = clock[q] = start + c_.p2p;
    ++pc[r];
    ++pc[q];
    return true;
  }

  // Busy time, bubble and memory, replayed per rank in list order (a rank is sequential).
  void summarize() {
    const int p = s_.ranks;
    result_.busy.assign(p, 0.0);
    result_.bubble_per_rank.assign(p, 0.0);
    result_.peak_activation.assign(p, 0.0);
    result_.peak_activation_per_stage.assign(s_.stages(), 0.0);
    result_.peak_alive.assign(p, 0);
    std::vector<double> stage_memory(s_.stages(), 0.0);
    const double kept = s_.recompute ? c_.stashed_fraction : 1.0;
    for (int r = 0; r < p; ++r) {
      double memory = 0.0;
      int alive = 0;
      const auto change = [&](int stage, double delta) {
        memory += delta;
        stage_memory[stage] += delta;
        result_.peak_activation[r] = std::max(result_.peak_activation[r], memory);
        result_.peak_activation_per_stage[stage] = std::max(result_.peak_activation_per_stage[stage], stage_memory[stage]);
      };
      for (const TimedInstruction& t : result_.timeline[r]) {
        const Instruction& ins = s_.programs[r][t.index];
        result_.total_time = std::max(result_.total_time, t.end);
        if (!pipeline::is_compute(ins.op)) continue;
        result_.busy[r] += t.end - t.start;
        const double act = c_.activation[static_cast<std::size_t>(ins.stage)];
        const bool releases = ins.op == (s_.split_backward ? Op::BackwardWeight : Op::Backward);
        if (ins.op == Op::Forward) {
          change(ins.stage, act);
          change(ins.stage, -act * (1.0 - kept));
          result_.peak_alive[r] = std::max(result_.peak_alive[r], ++alive);
        } else if (ins.op == Op::Recompute) {
          change(ins.stage, act * (1.0 - kept));
        } else if (releases) {
          change(ins.stage, -act);
          --alive;
        }
      }
    }
    double idle_sum = 0.0;
    for (int r = 0; r < p; ++r) {
      const double idle = result_.total_time - result_.busy[r];
      result_.bubble_per_rank[r] = result_.total_time > 0 ? idle / result_.total_time : 0.0;
      idle_sum += result_.bubble_per_rank[r];
    }
    result_.bubble_fraction = idle_sum / p;
  }
};

}  // namespace

SimulationResult simulate_schedule(const pipeline::Schedule& schedule, const PipelineCosts& costs) {
  TS_CHECK(schedule.ranks >= 1 && schedule.chunks >= 1 && schedule.microbatches >= 1 && schedule.steps >= 1,
           "schedule shape p = {}, v = {}, m = {}, steps = {}: each must be at least 1", schedule.ranks,
           schedule.chunks, schedule.microbatches, schedule.steps);
  check_costs(schedule, costs);
  // The simulator indexes by stage, microbatch and peer: only well-formed lists may reach it.
  const pipeline::ValidationReport report = pipeline::validate(schedule);
  TS_CHECK(report.ok(), "cannot simulate an invalid {} schedule: {}", pipeline::schedule_name(schedule.kind),
           report.summary());
  return Simulator(schedule, costs).run();
}

}  // namespace tessera::plan
