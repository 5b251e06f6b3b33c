#include "exec/program.h"

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

std::string describe(const Action& a) {
  if (a.kind == Action::Kind::OptimizerStep) return fmt::format("optimizer step (chunk {})", a.chunk);
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
    case pipeline::Op::Recv:
      TS_FAIL("'{}': transfers between pipeline ranks need the pipeline executor; this program runs one rank "
              "holding every stage",
              pipeline::describe(ins));
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
  for (const pipeline::Instruction& ins : schedule.programs[static_cast<size_t>(rank)]) {
    lower_instruction(ins, plan.stages[static_cast<size_t>(ins.stage)], plan.units, program.actions);
  }
  return program;
}

Program lower_evaluation(int units) {
  Program program;
  program.microbatches = 1;
  program.training = false;
  for (int u = 0; u < units; ++u) {
    Action a;
    a.phase = Phase::Eval;
    a.unit = u;
    a.keep = memory::Keep::Nothing;
    program.actions.push_back(a);
  }
  return program;
}

}  // namespace tessera::exec
