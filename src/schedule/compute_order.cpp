#include "schedule/compute_order.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "core/check.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

Schedule start_schedule(ScheduleKind kind, const config::ParallelLayout& layout, const GeneratorOptions& options) {
  check_layout_for(kind, layout, options);
  Schedule s;
  s.kind = kind;
  s.ranks = layout.pp;
  // check_layout_for bounds m far below the int range.
  s.microbatches = static_cast<int>(layout.microbatches());
  s.chunks = layout.virtual_stages;
  s.steps = options.steps;
  s.first_step = options.first_step;
  s.flush = kind != ScheduleKind::PipeDream2BW;
  s.split_backward = kind == ScheduleKind::ZeroBubbleH1;
  s.recompute = options.recompute;
  s.programs.resize(layout.pp);
  return s;
}

void push_compute(std::vector<Instruction>& order, const Schedule& schedule, Op op, int stage, int microbatch,
                  int weight_version) {
  Instruction ins;
  ins.op = op;
  ins.stage = stage;
  ins.chunk = schedule.chunk_of_stage(stage);
  ins.microbatch = microbatch;
  ins.weight_version = weight_version;
  order.push_back(ins);
}

void push_optimizer_steps(std::vector<Instruction>& order, const Schedule& schedule, int rank, int version) {
  for (int c = 0; c < schedule.chunks; ++c) {
    Instruction ins;
    ins.op = Op::OptimizerStep;
    ins.stage = schedule.stage_of(rank, c);
    ins.chunk = c;
    ins.weight_version = version;
    order.push_back(ins);
  }
}

namespace {

// Integer costs keep ties exact, so the order does not depend on rounding.
std::int64_t nominal_cost(Op op) {
  switch (op) {
    case Op::Forward: return 1;
    case Op::Backward: return 2;
    case Op::BackwardInput: return 1;
    case Op::BackwardWeight: return 1;
    case Op::Recompute: return 1;
    default: return 0;
  }
}

void add_recompute(Schedule& schedule) {
  for (auto& program : schedule.programs) {
    std::vector<Instruction> with;
    with.reserve(program.size() * 3 / 2);
    for (const Instruction& ins : program) {
      if (ins.op == Op::Backward || ins.op == Op::BackwardInput) {
        Instruction r = ins;
        r.op = Op::Recompute;
        with.push_back(r);
      }
      with.push_back(ins);
    }
    program = std::move(with);
  }
}

struct Event {
  std::int64_t time;
  int is_compute;  // transfers (0) sort before compute (1) starting at the same time
  int a, b, c;     // compute: rank, index; transfer: tensor, microbatch, edge
  bool operator<(const Event& o) const {
    return std::tie(time, is_compute, a, b, c) < std::tie(o.time, o.is_compute, o.a, o.b, o.c);
  }
};

// The compute order played as pure dataflow with nominal costs.
using NominalStarts = std::vector<std::vector<std::int64_t>>;  // [rank][index]

NominalStarts play_nominal(const Schedule& schedule) {
  const int p = schedule.ranks, stages = schedule.stages(), mbs = schedule.total_microbatches();
  const auto slot = [&](int stage, int mb) { return static_cast<std::size_t>(stage) * mbs + mb; };
  const std::size_t slots = static_cast<std::size_t>(stages) * mbs;
  std::vector<std::int64_t> forward_end(slots, -1), backward_end(slots, -1);  // backward: input-gradient part
  NominalStarts start(p);
  for (int r = 0; r < p; ++r) start[r].resize(schedule.programs[r].size());
  std::vector<std::size_t> pc(p, 0);
  std::vector<std::int64_t> clock(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& program = schedule.programs[r];
      while (pc[r] < program.size()) {
        const Instruction& ins = program[pc[r]];
        TS_CHECK(is_compute(ins.op), "place_transfers expects compute-only lists, got {}", describe(ins));
        std::int64_t ready = clock[r];
        bool blocked = false;
        const auto need = [&](const std::vector<std::int64_t>& ends, int stage) {
          const std::int64_t t = ends[slot(stage, ins.microbatch)];
          blocked |= t < 0;
          ready = std::max(ready, t);
        };
        switch (ins.op) {
          case Op::Forward:
            if (ins.stage > 0) need(forward_end, ins.stage - 1);
            break;
          case Op::Backward:
          case Op::BackwardInput:
            need(forward_end, ins.stage);
            if (ins.stage + 1 < stages) need(backward_end, ins.stage + 1);
            break;
          case Op::BackwardWeight: need(backward_end, ins.stage); break;
          case Op::Recompute: need(forward_end, ins.stage); break;
          default: break;
        }
        if (blocked) break;
        start[r][pc[r]] = ready;
        clock[r] = ready + nominal_cost(ins.op);
        if (ins.op == Op::Forward) forward_end[slot(ins.stage, ins.microbatch)] = clock[r];
        if (ins.op == Op::Backward || ins.op == Op::BackwardInput) backward_end[slot(ins.stage, ins.microbatch)] = clock[r];
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    TS_CHECK(pc[r] == schedule.programs[r].size(),
             "{} generator produced a compute order that cannot run: rank {} waits forever at {}",
             schedule_name(schedule.kind), r, describe(schedule.programs[r][pc[r]]));
  return start;
}

// Every compute instruction and every cross-rank transfer as a timed event (see the header).
std::vector<Event> timed_events(const Schedule& schedule, const NominalStarts& starts) {
  std::vector<Event> events;
  for (int r = 0; r < schedule.ranks; ++r) {
    const auto& program = schedule.programs[r];
    for (std::size_t i = 0; i < program.size(); ++i) {
      const Instruction& ins = program[i];
      const std::int64_t start = starts[r][i];
      events.push_back({start, 1, r, static_cast<int>(i), 0});
      const std::int64_t end = start + nominal_cost(ins.op);
      const int mb = ins.microbatch, next = ins.stage + 1, prev = ins.stage - 1;
      if (ins.op == Op::Forward && next < schedule.stages() && schedule.rank_of_stage(next) != r) {
        events.push_back({end, 0, static_cast<int>(Tensor::Activation), mb, ins.stage});
      }
      if ((ins.op == Op::Backward || ins.op == Op::BackwardInput) && prev >= 0 && schedule.rank_of_stage(prev) != r) {
        events.push_back({end, 0, static_cast<int>(Tensor::Gradient), mb, prev});
      }
    }
  }
  std::sort(events.begin(), events.end());
  return events;
}

}  // namespace

void place_transfers(Schedule& schedule) {
  if (schedule.recompute) add_recompute(schedule);
  const std::vector<Event> events = timed_events(schedule, play_nominal(schedule));
  std::vector<std::vector<Instruction>> programs(schedule.ranks);
  for (int r = 0; r < schedule.ranks; ++r) programs[r].reserve(schedule.programs[r].size() * 2);
  for (const Event& e : events) {
    if (e.is_compute) {
      programs[e.a].push_back(schedule.programs[e.a][e.b]);
      continue;
    }
    const Tensor tensor = static_cast<Tensor>(e.a);
    const int edge = e.c;
    const int from_stage = tensor == Tensor::Activation ? edge : edge + 1;
    const int to_stage = tensor == Tensor::Activation ? edge + 1 : edge;
    const int from = schedule.rank_of_stage(from_stage);
    const int to = schedule.rank_of_stage(to_stage);
    Instruction send;
    send.op = Op::Send;
    send.stage = from_stage;
    send.chunk = schedule.chunk_of_stage(from_stage);
    send.microbatch = e.b;
    send.tensor = tensor;
    send.peer = to;
    Instruction recv = send;
    recv.op = Op::Recv;
    recv.stage = to_stage;
    recv.chunk = schedule.chunk_of_stage(to_stage);
    recv.peer = from;
    programs[from].push_back(send);
    programs[to].push_back(recv);
  }
  schedule.programs = std::move(programs);
}

}  // namespace tessera::pipeline
