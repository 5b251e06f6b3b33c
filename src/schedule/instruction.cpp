#include "schedule/instruction.h"

#include <fmt/format.h>

#include "core/check.h"

namespace tessera::pipeline {

bool is_compute(Op op) { return !is_transfer(op); }
bool is_transfer(Op op) { return op == Op::Send || op == Op::Recv; }

int transfer_edge(const Instruction& ins) {
  TS_CHECK(is_transfer(ins.op), "transfer_edge of a non-transfer instruction {}", describe(ins));
  // An activation leaves stage e for e + 1; a gradient leaves stage e + 1 for e.
  const bool sender = ins.op == Op::Send;
  if (ins.tensor == Tensor::Activation) return sender ? ins.stage : ins.stage - 1;
  TS_CHECK(ins.tensor == Tensor::Gradient, "transfer without a tensor kind: {}", describe(ins));
  return sender ? ins.stage - 1 : ins.stage;
}

std::string op_name(Op op) {
  switch (op) {
    case Op::Forward: return "forward";
    case Op::Backward: return "backward";
    case Op::BackwardInput: return "backward-input";
    case Op::BackwardWeight: return "backward-weight";
    case Op::Recompute: return "recompute";
    case Op::Send: return "send";
    case Op::Recv: return "recv";
    case Op::OptimizerStep: return "optimizer-step";
  }
  return "?";
}

std::string describe(const Instruction& ins) {
  if (ins.op == Op::OptimizerStep)
    return fmt::format("optimizer-step stage {} chunk {} -> weights v{}", ins.stage, ins.chunk, ins.weight_version);
  if (is_transfer(ins.op)) {
    // Must not throw: it is used to describe malformed instructions too.
    const bool act = ins.tensor == Tensor::Activation;
    const bool grad = ins.tensor == Tensor::Gradient;
    const bool send = ins.op == Op::Send;
    std::string route = "?";
    if (act) route = send ? fmt::format("{} -> {}", ins.stage, ins.stage + 1) : fmt::format("{} -> {}", ins.stage - 1, ins.stage);
    if (grad) route = send ? fmt::format("{} -> {}", ins.stage, ins.stage - 1) : fmt::format("{} -> {}", ins.stage + 1, ins.stage);
    return fmt::format("{} {} of microbatch {} (stage {}) {} rank {}", op_name(ins.op),
                       act ? "activation" : (grad ? "gradient" : "<no tensor>"), ins.microbatch, route,
                       send ? "to" : "from", ins.peer);
  }
  std::string s = fmt::format("{} stage {} microbatch {}", op_name(ins.op), ins.stage, ins.microbatch);
  if (ins.chunk != 0) s += fmt::format(" chunk {}", ins.chunk);
  if (ins.weight_version != 0) s += fmt::format(" weights v{}", ins.weight_version);
  return s;
}

}  // namespace tessera::pipeline
