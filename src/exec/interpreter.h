#pragma once
// The interpreter: the one place where a training step (or an evaluation batch) is executed. It
// runs a Program (exec/program.h) action by action on the model's units, keeping for every
// (unit, microbatch) what the schedule says must survive: a unit's saved activations, its stored
// input (a recompute checkpoint), the gradient flowing to the unit below. Around each action it
// tells the transform chain (exec/transform.h) and sets the current event on the parameter
// ownership, so transforms and storage owners act at the right moment.
//
// Plain training with gradient accumulation is the program of the one-stage 1F1B schedule
// (F0 B0 F1 B1 ...); a pipeline rank runs the same interpreter on its own list, whose Send and
// Recv actions move activations and gradients over the pipeline group's point-to-point
// operations. Receives are posted ahead: those that follow a unit action are posted before it
// runs, so the transfer overlaps its compute, and each is waited for right before the unit action
// that reads its tensor (the schedule simulator's isend/irecv timing), not at its place in the
// list. Sends are handed to MPI before the rank computes again, complete in the background and
// are waited for before the program ends. The lists are ordered for rendezvous semantics
// (pipeline/validator.h), so they cannot deadlock even where a receive would wait at its place;
// waiting later only removes waits. Transfers are the interpreter's own: transforms see unit
// actions only.
//
// Memory follows memory/chain.h's rules exactly, so a recompute policy's predicted activation
// peak is what the allocator measures: after a forward keeping All the unit's activations stay
// (and with them its input), keeping Input only the stored input stays, keeping Nothing only the
// output; an output goes into the next unit's input slot unless that unit's backward has already
// run; a backward frees the unit's activations and input. The input half of a split backward
// keeps what the weight half needs until it runs.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/profiler.h"
#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/program.h"
#include "exec/timeline_recorder.h"
#include "exec/transform.h"
#include "nn/gpt.h"

namespace tessera::exec {

// One microbatch's data and where its sequences sit in the global batch (dropout masks are keyed
// by global sample index, so they do not depend on the layout).
struct MicrobatchInput {
  nn::GPT::Microbatch data;
  int64_t sample_offset = 0;
};

struct StepOptions {
  uint64_t seed = 0;  // dropout
  // Optimizer step (dropout masks differ per step): that of the program's first batch; batch b of a
  // program of several runs as step + b.
  uint64_t step = 0;
  // Records each action's start and end (exec/timeline_recorder.h); null: nothing recorded.
  TimelineRecorder* timeline = nullptr;
  // Times the step's phases and, as the thread's current profiler for the run, its ops, waits and
  // casts (core/profiler.h); null: nothing timed.
  Profiler* profiler = nullptr;
};

struct ProgramResult {
  double loss_sum = 0;  // over the program's microbatches
  int64_t counted = 0;  // targets that count
  // The same, batch by batch ([program.batches]; filled for training programs).
  std::vector<double> batch_loss_sums;
  std::vector<int64_t> batch_counted;
  // What the MoE layers' routing did in the program's training forwards (nn/moe.h); empty for a
  // dense model.
  nn::MoeStatistics moe;
  // Wall time of the program's Recompute actions on this rank: what recomputation cost it.
  double recompute_seconds = 0;
};

class Interpreter {
 public:
  // `pipeline`: the pipeline group, for programs with transfers (nullptr: one stage).
  // `compute`: the dtype of activations and of the working copies the units read (f32, or bf16
  // or f16 under mixed precision, whose working copies a precision transform provides).
  // What else a unit computes with — a tensor-parallel region, an expert exchange, a loss scale —
  // the chain's transforms install in the event's step context (exec/transform.h).
  Interpreter(nn::GPT& model, ParameterOwnership& ownership, TransformChain& transforms, MemoryAccountant& memory,
              dist::Communicator* pipeline = nullptr, DType compute = DType::F32);

  // Runs `program` on `microbatches` (indexed by the actions' microbatch). `optimizer_step` is
  // called with the batch at each of the program's optimizer steps, after every microbatch of that
  // batch is back-propagated on this rank and the transform chain finished it.
  ProgramResult run(const Program& program, std::span<const MicrobatchInput> microbatches, const StepOptions& options,
                    const std::function<void(int batch)>& optimizer_step = {});

 private:
  struct MicrobatchState {
    std::vector<nn::GPT::UnitCtx> ctx;  // [unit]
    std::vector<bool> kept;             // [unit]: ctx holds the unit's activations
    std::vector<bool> awaiting_weight;  // [unit]: the input half ran, the weight half has not
    std::vector<Tensor> input;          // [unit]: stored input x_u (u >= 1)
    std::vector<Tensor> grad;           // [unit]: gradient of x_u, for unit u - 1's backward
    int backward_done = 0;              // the lowest unit whose backward (input half) ran
  };
  void forward(const Action& a, MicrobatchState& s, const MicrobatchInput& mb, nn::StepContext& step,
               ProgramResult& result);
  void backward(const Action& a, MicrobatchState& s, nn::StepContext& step);
  // Microbatches [first, end) hold nothing more and, in training, were back-propagated.
  void check_finished(const Program& program, const std::vector<MicrobatchState>& states, int first, int end) const;
  struct Transfer {
    dist::WorkPtr work;
    Tensor buffer;  // kept alive until the transfer completes
  };
  // Posts the receives of the transfer actions that follow action `i`.
  void post_receives_after(const Program& program, int i, std::span<const MicrobatchInput> microbatches,
                           std::vector<Transfer>& posted);
  // Waits for the receive of action i (posted already) and puts the tensor into its slot.
  void receive(const Program& program, int i, MicrobatchState& s, std::vector<Transfer>& posted);
  // Posts the send of action i, taking the tensor from its slot; it completes in the background.
  void send(const Program& program, int i, MicrobatchState& s, std::vector<Transfer>& sends);

  nn::GPT& model_;
  ParameterOwnership& ownership_;
  TransformChain& transforms_;
  MemoryAccountant& memory_;
  dist::Communicator* pipeline_;
  DType compute_;
};

}  // namespace tessera::exec
