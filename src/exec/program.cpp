#include "exec/program.h"

#include <algorithm>
#include <limits>

#include <fmt/ranges.h>

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

bool backward_follows(const Program& program, int index) {
  const Action& a = program.actions[static_cast<size_t>(index)];
  for (size_t j = static_cast<size_t>(index) + 1; j < program.actions.size(); ++j) {
    const Action& next = program.actions[j];
    if (next.kind != Action::Kind::Unit) continue;
    return writes_gradients(next.phase) && next.unit == a.unit && next.microbatch == a.microbatch;
  }
  return false;
}

std::string describe(const Action& a) {
  if (a.kind == Action::Kind::OptimizerStep) {
    return a.batch == 0 ? fmt::format("optimizer step (chunk {})", a.chunk)
                        : fmt::format("optimizer step of batch {} (chunk {})", a.batch, a.chunk);
  }
  if (is_transfer(a)) {
    const bool activation = a.payload == pipeline::Tensor::Activation;
    return fmt::format("{} {} mb{} across stages {}|{} {} rank {}", a.kind == Action::Kind::Send ? "send" : "recv",
                       activation ? "activation" : "gradient", a.microbatch, a.edge, a.edge + 1,
                       a.kind == Action::Kind::Send ? "to" : "from", a.peer);
  }
  std::string text = fmt::format("{} unit {} mb{}", phase_name(a.phase), a.unit, a.microbatch);
  if (a.chunk != 0) text += fmt::format(" chunk {}", a.chunk);
  if (a.weight_version >= 0) text += fmt::format(" weights v{}", a.weight_version);
  if (is_forward(a.phase)) {
    text += fmt::format(" (keep {}{}{})", memory::keep_name(a.keep), a.selective ? ", selective" : "",
                        a.offload ? ", offloaded" : "");
  }
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

StagePlan stages_of_blocks(int units, std::span<const int64_t> blocks) {
  TS_CHECK(!blocks.empty(), "a stage split needs at least one stage");
  int64_t total = 0;
  for (int64_t b : blocks) {
    TS_CHECK(b >= 1, "every stage needs at least one block (a split of {} stages gives one {})", blocks.size(), b);
    total += b;
  }
  TS_CHECK(total == units - 2, "the stages hold {} blocks but the model has {}", total, units - 2);
  StagePlan plan;
  plan.units = units;
  int next = 1;  // the first block
  for (size_t s = 0; s < blocks.size(); ++s) {
    StagePlan::Stage stage;
    stage.first = s == 0 ? 0 : next;
    next += static_cast<int>(blocks[s]);
    stage.last = s + 1 == blocks.size() ? units : next;
    stage.recompute = memory::none_schedule(stage.last - stage.chain_first());
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

StagePlan balanced_stages(std::span<const double> unit_costs, int stages) {
  const int units = static_cast<int>(unit_costs.size()), blocks = units - 2;
  TS_CHECK(stages >= 1 && blocks >= stages,
           "cannot split {} blocks into {} stages: every stage needs at least one block", blocks, stages);
  // cost of blocks [i, j) (block b is unit b + 1), with the embedding on the first stage and the head on the last.
  std::vector<double> prefix(static_cast<size_t>(blocks) + 1, 0.0);
  for (int b = 0; b < blocks; ++b) prefix[static_cast<size_t>(b) + 1] = prefix[static_cast<size_t>(b)] + unit_costs[static_cast<size_t>(b) + 1];
  auto cost = [&](int s, int i, int j) {
    double c = prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)];
    if (s == 0) c += unit_costs.front();
    if (s == stages - 1) c += unit_costs.back();
    return c;
  };
  // best[s][j]: the smallest slowest stage of stages 0..s holding blocks [0, j); choice: where stage s starts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(stages), std::vector<double>(static_cast<size_t>(blocks) + 1, inf));
  std::vector<std::vector<int>> start(static_cast<size_t>(stages), std::vector<int>(static_cast<size_t>(blocks) + 1, 0));
  for (int j = 1; j <= blocks; ++j) best[0][static_cast<size_t>(j)] = cost(0, 0, j);
  for (int s = 1; s < stages; ++s) {
    for (int j = s + 1; j <= blocks; ++j) {
      // Scanning i upward and replacing only on a strict improvement keeps the earliest start of
      // stage s among equals: it takes the blocks, the earlier stages get fewer.
      for (int i = s; i < j; ++i) {
        const double c = std::max(best[static_cast<size_t>(s) - 1][static_cast<size_t>(i)], cost(s, i, j));
        if (c < best[static_cast<size_t>(s)][static_cast<size_t>(j)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(j)] = c;
          start[static_cast<size_t>(s)][static_cast<size_t>(j)] = i;
        }
      }
    }
  }
  std::vector<int64_t> counts(static_cast<size_t>(stages));
  for (int s = stages - 1, j = blocks; s >= 0; --s) {
    const int i = s == 0 ? 0 : start[static_cast<size_t>(s)][static_cast<size_t>(j)];
    counts[static_cast<size_t>(s)] = j - i;
    j = i;
  }
  return stages_of_blocks(units, counts);
}

std::string describe_stages(const StagePlan& plan) {
  std::string text;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan::Stage& stage = plan.stages[s];
    std::vector<std::string> parts;
    if (stage.first == 0) parts.push_back("embedding");
    const int first_block = stage.chain_first() - 1, last_block = std::min(stage.last, plan.units - 1) - 2;
    if (last_block >= first_block) {
      parts.push_back(first_block == last_block ? fmt::format("block {}", first_block)
                                                : fmt::format("blocks {}-{}", first_block, last_block));
    }
    if (stage.last == plan.units) parts.push_back("head");
    text += fmt::format("{}{}", s == 0 ? "" : " | ", fmt::join(parts, " + "));
  }
  return text;
}

namespace {

// Appends the actions of one stage instruction.
void lower_instruction(const pipeline::Schedule& schedule, const pipeline::Instruction& ins,
                       const StagePlan::Stage& stage, int units, std::vector<Action>& out) {
  const int first = stage.chain_first();
  const bool has_embedding = stage.first == 0;
  const int batch = ins.op == pipeline::Op::OptimizerStep ? ins.weight_version - schedule.first_step - 1
                                                          : ins.microbatch / schedule.microbatches;
  auto unit_action = [&](Phase phase, int unit, memory::Keep keep = memory::Keep::All) {
    Action a;
    a.phase = phase;
    a.unit = unit;
    a.chunk = ins.chunk;
    a.microbatch = ins.microbatch;
    a.keep = keep;
    a.batch = batch;
    a.weight_version = schedule.flush ? -1 : ins.weight_version;
    out.push_back(a);
    return &out.back();
  };
  auto chain_op = [&](const memory::ChainOp& op, Phase forward_phase, Phase backward_phase) {
    const int unit = first + op.unit;
    if (unit >= stage.last) return;  // the boundary that closes a headless stage's chain (exec::stage_chain)
    // A selective keep is a forward keeping all that drops what is cheap to rebuild (the action's
    // selective flag): the model's units know that much and no more.
    const bool selective_keep = op.is_forward() && op.keep == memory::Keep::Selective;
    Action* a = unit_action(op.is_forward() ? forward_phase : backward_phase, unit,
                            selective_keep ? memory::Keep::All : op.keep);
    // Selective recomputation drops parts of blocks; the head, the chain's last unit, keeps all.
    a->selective = (stage.selective || selective_keep) && op.is_forward() && unit + 1 < units;
    a->offload = a->phase == Phase::Forward && a->keep == memory::Keep::All &&
                 std::binary_search(stage.offloaded.begin(), stage.offloaded.end(), unit);
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
      a.batch = batch;
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
        a.batch = batch;
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
  program.microbatches = schedule.total_microbatches();
  program.batches = schedule.steps;
  program.training = true;
  program.stages = schedule.stages();
  program.first_unit = plan.units;
  for (int s = rank; s < schedule.stages(); s += schedule.ranks) {
    program.first_unit = std::min(program.first_unit, plan.stages[static_cast<size_t>(s)].first);
  }
  const std::vector<pipeline::Instruction>& instructions = schedule.programs[static_cast<size_t>(rank)];
  for (size_t i = 0; i < instructions.size(); ++i) {
    const size_t first = program.actions.size();
    lower_instruction(schedule, instructions[i], plan.stages[static_cast<size_t>(instructions[i].stage)], plan.units,
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
  // This rank's stages in order (stage s on rank s % ranks as chunk s / ranks). With one rank
  // (interleaved chunks at pp = 1) the next stage is on this rank, and the output stays where the
  // next unit reads it, as in a training program.
  for (int s = rank; s < stages; s += ranks) {
    const StagePlan::Stage& stage = plan.stages[static_cast<size_t>(s)];
    if (s > 0 && ranks > 1) transfer(Action::Kind::Recv, stage.first, (s - 1) % ranks, s - 1);
    for (int u = stage.first; u < stage.last; ++u) {
      Action a;
      a.phase = Phase::Eval;
      a.unit = u;
      a.chunk = s / ranks;
      a.keep = memory::Keep::Nothing;
      program.actions.push_back(a);
    }
    if (s + 1 < stages && ranks > 1) transfer(Action::Kind::Send, stage.last, (s + 1) % ranks, s);
  }
  return program;
}

}  // namespace tessera::exec
