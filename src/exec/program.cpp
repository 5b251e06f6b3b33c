#include "exec/program.h"

#include <algorithm>

#include "core/check.h"
#include "memory/recompute_policy.h"

namespace tessera::exec {

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Recompute: return "recompute";
    case Phase::Backward: return "backward";
    case Phase::BackwardInput: return "backward-input";
    case Phase::BackwardWeight: return "backward-weight";
    case Phase::Eval: return "eval";
  }
  return "unknown";
}

bool is_forward(Phase phase) { return phase == Phase::Forward || phase == Phase::Recompute || phase == Phase::Eval; }

bool writes_gradients(Phase phase) {
  return phase == Phase::Backward || phase == Phase::BackwardInput || phase == Phase::BackwardWeight;
}

bool is_transfer(const Action& a) { return a.kind == Action::Kind::Send || a.kind == Action::Kind::Recv; }

std::string describe(const Action& a) {
  if (a.kind == Action::Kind::OptimizerStep) return fmt::format("optimizer step (chunk {})", a.chunk);
  if (is_transfer(a)) {
    const bool activation = a.payload == pipeline::Tensor::Activation;
    return fmt::format("{} {} mb{} across stages {}|{} {} rank {}", a.kind == Action::Kind::Send ? "send" : "recv",
                       activation ? "activation" : "gradient", a.microbatch, a.edge, a.edge + 1,
                       a.kind == Action::Kind::Send ? "to" : "from", a.peer);
  }
  std::string text = fmt::format("{} unit {} mb{}", phase_name(a.phase), a.unit, a.microbatch);
  if (a.chunk != 0) text += fmt::format(" chunk {}", a.chunk);
  if (is_forward(a.phase)) text += fmt::format(" (keep {}{})", memory::keep_name(a.keep), a.selective ? ", selective" : "");
  return text;
}

StagePlan even_stages(int units, int stages) {
  const int blocks = units - 2;
  TS_CHECK(stages >= 1 && blocks >= stages,
           "cannot split {} blocks into {} stages: every stage needs at least one block", blocks, stages);
  StagePlan plan;
  plan.units = units;
  int next = 1;  // the first block
  for (int s = 0; s < stages; ++s) {
    const int count = blocks / stages + (s < blocks % stages ? 1 : 0);
    StagePlan::Stage stage;
    stage.first = s == 0 ? 0 : next;
    next += count;
    stage.last = s + 1 == stages ? units : next;
    stage.recompute = memory::none_schedule(stage.last - stage.chain_first());
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

namespace {

// Appends the actions of one stage instruction.
void lower_instruction(const pipeline::Instruction& ins, const StagePlan::Stage& stage, int units,
                       std::vector<Action>& out) {
  const int first = stage.chain_first();
  const bool has_embedding = stage.first == 0;
  auto unit_action = [&](Phase phase, int unit, memory::Keep keep = memory::Keep::All) {
    Action a;
    a.phase = phase;
    a.unit = unit;
    a.chunk = ins.chunk;
    a.microbatch = ins.microbatch;
    a.keep = keep;
    out.push_back(a);
    return &out.back();
  };
  auto chain_op = [&](const memory::ChainOp& op, Phase forward_phase, Phase backward_phase) {
    const int unit = first + op.unit;
    Action* a = unit_action(op.is_forward() ? forward_phase : backward_phase, unit, op.keep);
    // Selective recomputation drops parts of blocks; the head, the chain's last unit, keeps all.
    a->selective = stage.selective && op.is_forward() && unit + 1 < units;
  };
  switch (ins.op) {
    case pipeline::Op::Forward:
      if (has_embedding) unit_action(Phase::Forward, 0);
      for (const memory::ChainOp& op : stage.recompute.forward) chain_op(op, Phase::Forward, Phase::Backward);
      return;
    case pipeline::Op::Backward:
    case pipeline::Op::BackwardInput: {
      const Phase phase = ins.op == pipeline::Op::Backward ? Phase::Backward : Phase::BackwardInput;
      for (const memory::ChainOp& op : stage.recompute.backward) chain_op(op, Phase::Recompute, phase);
      if (has_embedding) unit_action(phase, 0);
      return;
    }
    case pipeline::Op::BackwardWeight:
      for (int u = stage.last - 1; u >= stage.first; --u) unit_action(Phase::BackwardWeight, u);
      return;
    case pipeline::Op::Recompute:
      TS_FAIL("stage-level recompute instructions are not executed: recomputation comes from memory.recompute "
              "(generate the schedule without recompute)");
    case pipeline::Op::Send:
    case pipeline::Op::Recv: {
      Action a;
      a.kind = ins.op == pipeline::Op::Send ? Action::Kind::Send : Action::Kind::Recv;
      a.chunk = ins.chunk;
      a.microbatch = ins.microbatch;
      a.payload = ins.tensor;
      a.peer = ins.peer;
      a.edge = pipeline::transfer_edge(ins);
      // The stage is the producer of a Send and the consumer of a Recv: an activation crosses from
      // the producer's last unit into the consumer's first, a gradient the other way.
      const bool at_end = (ins.op == pipeline::Op::Send) == (ins.tensor == pipeline::Tensor::Activation);
      a.unit = at_end ? stage.last : stage.first;
      out.push_back(a);
      return;
    }
    case pipeline::Op::OptimizerStep:
      if (out.empty() || out.back().kind != Action::Kind::OptimizerStep) {
        Action a;
        a.kind = Action::Kind::OptimizerStep;
        a.chunk = ins.chunk;
        a.microbatch = -1;
        out.push_back(a);
      }
      return;
  }
}

}  // namespace

Program lower_training(const pipeline::Schedule& schedule, int rank, const StagePlan& plan) {
  TS_CHECK(rank >= 0 && rank < schedule.ranks, "rank {} outside the schedule's {} ranks", rank, schedule.ranks);
  TS_CHECK(static_cast<int>(plan.stages.size()) == schedule.stages(),
           "the stage plan has {} stages but the schedule {}", plan.stages.size(), schedule.stages());
  Program program;
  program.microbatches = schedule.microbatches;
  program.training = true;
  program.stages = schedule.stages();
  program.first_unit = plan.units;
  for (int s = rank; s < schedule.stages(); s += schedule.ranks) {
    program.first_unit = std::min(program.first_unit, plan.stages[static_cast<size_t>(s)].first);
  }
  const std::vector<pipeline::Instruction>& instructions = schedule.programs[static_cast<size_t>(rank)];
  for (size_t i = 0; i < instructions.size(); ++i) {
    const size_t first = program.actions.size();
    lower_instruction(instructions[i], plan.stages[static_cast<size_t>(instructions[i].stage)], plan.units,
                      program.actions);
    for (size_t a = first; a < program.actions.size(); ++a) program.actions[a].instruction = static_cast<int>(i);
  }
  return program;
}

Program lower_evaluation(const StagePlan& plan, int rank, int ranks) {
  const int stages = static_cast<int>(plan.stages.size());
  TS_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && stages % ranks == 0,
           "cannot lower an evaluation of {} stages for rank {} of {}", stages, rank, ranks);
  Program program;
  program.microbatches = 1;
  program.training = false;
  program.stages = stages;
  program.first_unit = plan.stages[static_cast<size_t>(rank)].first;
  auto transfer = [&](Action::Kind kind, int unit, int peer, int edge) {
    Action a;
    a.kind = kind;
    a.unit = unit;
    a.payload = pipeline::Tensor::Activation;
    a.peer = peer;
    a.edge = edge;
    program.actions.push_back(a);
  };
  // This rank's stages in order (stage s on rank s % ranks as chunk s / ranks).
  for (int s = rank; s < stages; s += ranks) {
    const StagePlan::Stage& stage = plan.stages[static_cast<size_t>(s)];
    if (s > 0) transfer(Action::Kind::Recv, stage.first, (s - 1) % ranks, s - 1);
    for (int u = stage.first; u < stage.last; ++u) {
      Action a;
      a.phase = Phase::Eval;
      a.unit = u;
      a.chunk = s / ranks;
      a.keep = memory::Keep::Nothing;
      program.actions.push_back(a);
    }
    if (s + 1 < stages) transfer(Action::Kind::Send, stage.last, (s + 1) % ranks, s);
  }
  return program;
}

}  // namespace tessera::exec
