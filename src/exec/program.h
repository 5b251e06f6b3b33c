#pragma once
// A program: what one rank executes for one training step (or one evaluation batch), as a flat
// list of actions on units of the model. It is lowered from the rank's instruction list of a
// pipeline schedule (src/schedule) and the recompute plan of each stage, so it says
// everything that will run, recomputations included, before anything runs: transforms read it to
// look ahead (ZeRO-3 prefetches the parameters of the next action that needs others; the gradient
// reducer posts a bucket after the last action that writes its gradients), instead of inferring
// their position from call order.
//
// Lowering of the schedule's instructions for one stage of units [first, last):
//   Forward(stage, mb)        the embedding (if the stage holds it) keeping all, then the forward
//                             phase of the stage's recompute chain (each unit keeping all, its
//                             input, or nothing, memory/chain.h)
//   Backward(stage, mb)       the chain's backward phase: Recompute actions where it recomputes,
//                             Backward actions, then the embedding's backward
//   BackwardInput(stage, mb)  the same with the input halves (BackwardInput)
//   BackwardWeight(stage, mb) the weight halves of every unit of the stage, last unit first
//   OptimizerStep(chunk)      an optimizer step (one for the run of consecutive OptimizerSteps)
// A PipeDream-2BW program covers several batches (optimizer steps) without a flush: each unit
// action names the weight version it reads, and each optimizer step the batch it applies.
//   Send(tensor, mb, peer)    a transfer between pipeline ranks: an activation is the output of
//   Recv(tensor, mb, peer)    the stage's last unit (the next stage's input), a gradient that of the
//                             stage's first unit's input; `unit` names that slot (see Action)
// Stage-level Recompute instructions are expressed by the recompute plans instead.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/chain.h"
#include "memory/remat/chain_checkmate.h"
#include "schedule/instruction.h"

namespace tessera::exec {

enum class Phase : uint8_t {
  Forward,         // the first forward of a unit for a training microbatch
  Recompute,       // a forward again, during the backward phase, from a stored input
  Backward,        // input and weight gradients in one pass
  BackwardInput,   // the input half (zero-bubble's B)
  BackwardWeight,  // the weight half (zero-bubble's W)
  Eval,            // forward only, nothing kept
};
std::string_view phase_name(Phase phase);  // "forward", "recompute", "backward", "backward-input", ...
bool is_forward(Phase phase);              // Forward, Recompute, Eval
bool writes_gradients(Phase phase);        // Backward, BackwardInput, BackwardWeight

struct Action {
  enum class Kind : uint8_t { Unit, OptimizerStep, Send, Recv };
  Kind kind = Kind::Unit;
  Phase phase = Phase::Forward;
  // Unit actions: the unit run. Transfers: the unit whose slot the tensor leaves or fills: an
  // activation is the input of `unit` (the first unit of the receiving stage), a gradient that of
  // `unit`'s input (the first unit of the sending stage).
  int unit = 0;
  int chunk = 0;
  int microbatch = 0;
  // Forward phases: what stays after the unit ran (never Selective: a chain's selective keep
  // lowers to All with `selective`).
  memory::Keep keep = memory::Keep::All;
  bool selective = false;                 // forward phases of a block: drop what is cheap to rebuild
  // A training forward keeping All: what the unit saved goes to the nvme tier until its backward
  // (exec/activation_offload.h).
  bool offload = false;
  // Transfers: what moves, the pipeline rank at the other end, and the stage boundary crossed
  // (edge e joins stages e and e + 1).
  pipeline::Tensor payload = pipeline::Tensor::None;
  int peer = -1;
  int edge = -1;
  // The position in the rank's instruction list of the instruction this action was lowered from
  // (a run of consecutive optimizer steps: the first); -1 when it comes from no schedule
  // (evaluation). Timelines group the actions of one instruction by it.
  int instruction = -1;
  // The batch of the program the action belongs to (0 for programs of one batch); an optimizer
  // step: the batch whose gradients it applies.
  int batch = 0;
  // Unit actions of a PipeDream-2BW program: the weight version the unit reads, in optimizer steps
  // since training began (pipeline::Instruction::weight_version). -1: the newest, whatever it is
  // (flushing schedules and evaluation).
  int weight_version = -1;

  bool operator==(const Action&) const = default;
};
std::string describe(const Action& action);  // "recompute blocks.3 mb1 (keep all)"

bool is_transfer(const Action& action);

struct Program {
  std::vector<Action> actions;
  int microbatches = 0;  // of all its batches: batch b holds microbatches [b m, (b + 1) m)
  int batches = 1;       // optimizer steps (several for PipeDream-2BW)
  bool training = true;
  int first_unit = 0;  // the lowest unit this rank runs: a microbatch's backward ends there
  int stages = 1;      // stages of the whole pipeline (transfer tags are unique per step)
};

// Whether the next unit action after action `index` (a unit's forward) is that unit's backward for
// the same microbatch: what the forward kept is read at once (the head's), so it is not worth
// moving or encoding.
bool backward_follows(const Program& program, int index);

// The units of each stage and how each stage recomputes. Stage s holds units [first[s], last[s])
// of the model; its recompute chain is those units without the embedding (always kept: its
// saved state is the token ids), the head last when the stage holds it.
struct StagePlan {
  struct Stage {
    int first = 0;  // first unit
    int last = 0;   // one past the last unit
    memory::ChainSchedule recompute;  // over the chain units [chain_first(), last)
    bool selective = false;
    // Units (of the model) whose activations, kept from their forward, are offloaded until their
    // backward; sorted.
    std::vector<int> offloaded;
    // memory.recompute = "checkmate": how the schedule came about (solved, cached or fallen back; the solver's
    // status and time). Its schedule is the one above.
    std::optional<memory::remat::ChainCheckmate> checkmate;
    int chain_first() const { return first == 0 ? 1 : first; }
    // Its transformer blocks, of a model of `n_layer` (units 1 to n_layer; the embedding and the
    // head are not blocks).
    int blocks(int n_layer) const { return std::min(last, n_layer + 1) - chain_first(); }
  };
  std::vector<Stage> stages;
  int units = 0;  // in the whole model
};

// Splits `units` (embedding, blocks, head) into `stages` consecutive stages with blocks spread
// evenly (the first stages take one more when they do not divide), the embedding on the first
// and the head on the last. Every stage's recompute schedule is `none` until set.
StagePlan even_stages(int units, int stages);
// The same with the blocks of each stage given (stage 0 first; they must sum to units − 2).
StagePlan stages_of_blocks(int units, std::span<const int64_t> blocks);
// The split whose slowest stage is fastest, by each unit's cost (forward and backward time of
// exec/recompute.h's UnitTimes, summed): the embedding goes with the first stage and the head with
// the last, every stage holds at least one block. Ties go to the split that puts fewer blocks on
// earlier stages, which under 1F1B hold the most microbatches at once.
StagePlan balanced_stages(std::span<const double> unit_costs, int stages);
// "embedding + blocks 0-1 | blocks 2-3 + head" (blocks numbered as the model's layers).
std::string describe_stages(const StagePlan& plan);

// The program of `rank` for the schedule's steps (one, or several for PipeDream-2BW; validated by
// the caller).
Program lower_training(const pipeline::Schedule& schedule, int rank, const StagePlan& plan);
// One evaluation microbatch through the units `rank` holds (all of them with one stage): each unit
// forward, keeping nothing, with the activations received before and sent after each stage.
Program lower_evaluation(const StagePlan& plan, int rank, int ranks);

}  // namespace tessera::exec
