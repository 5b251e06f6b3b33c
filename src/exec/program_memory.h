#pragma once
// The activation peak of a rank's program, predicted by walking its actions with the interpreter's
// rules (exec/interpreter.h) and each unit's bytes (config::unit_activation_bytes): the one
// prediction for any schedule, pipelined or not, recomputing or not, so that the planner and the
// trainer's start line state what the allocator will measure for the 'activations' tag.
//
// What the walk counts, as the interpreter allocates it:
//   - a unit's kept activations (its own bytes) from its forward keeping All to its backward; the
//     embedding's are its token ids;
//   - each stored unit input x_u: produced by the forward of unit u - 1 (when u - 1's output is
//     still wanted) or received from the previous stage, dropped by u's backward, by a forward that
//     keeps Nothing, or by the Send that hands it to the next stage (sent tensors travel in
//     communication buffers, not activations);
//   - a receive buffer from the moment it is posted (before the unit action that precedes its run
//     of transfers, so the transfer overlaps that compute);
//   - during a forward, its own bytes, its output and what it holds only while it runs; during a
//     backward, what it rebuilds (a selective block's dropped tensors);
//   - between the input half of a split backward and the weight half, what the weight half reads:
//     the inputs of the unit's linear layers (config::UnitActivationBytes::weight_half);
//   - an offloaded forward's kept bytes (Action::offload, exec/activation_offload.h) leave before
//     the unit action after the next, and come back before the backward before theirs;
//   - with an activation encoding (exec/activation_encoding.h), what a forward kept, its stored
//     input among it, takes its encoded size from the end of the forward to the start of its
//     backward (exec::encoded_stash_bytes; an upper bound where a sparse form may be smaller), unless
//     that backward is the program's next unit action; offloading moves the encoded bytes.
// Gradients flowing down are workspace, not activations, and are not counted.
#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "core/dtype.h"
#include "exec/activation_encoding.h"
#include "exec/program.h"

namespace tessera::exec {

struct ProgramMemory {
  int64_t peak = 0;                 // the largest live activation bytes at any point of the program
  int64_t nvme_peak = 0;            // the most offloaded activations on the nvme tier at once
  int64_t offloaded_bytes = 0;      // written to the nvme tier (and read back) over the program
  std::vector<int64_t> after;       // [action]: live bytes once the action is done
  std::vector<int64_t> during;      // [action]: the largest live bytes while it runs
  // [action]: the output gradients kept in workspace for weight halves still to run (zero bubble)
  // beside the action's own workspace: those of other units' backwards.
  std::vector<int64_t> weight_half_gradients;
};

// For `program` over microbatches of [B, T] tokens, the units forwarding with the keep and
// selective flags their actions carry.
// On a rank of `tp` tensor-parallel ranks, with sequence parallelism when `sp`, activations in
// `activations` (config::unit_activation_bytes).
ProgramMemory predict_program_memory(const Program& program, const config::ModelConfig& model, int B, int T,
                                     int tp = 1, bool sp = false, DType activations = DType::F32,
                                     ActivationEncoding encoding = ActivationEncoding::None);

// What a unit's actions hold in workspace while they run (config::unit_workspace_bytes, with what
// the rank has posted ahead for a transfer beside them).
struct UnitWorkspace {
  int64_t forward = 0;   // a forward or recompute
  int64_t backward = 0;  // a backward, either half of a split one
  int64_t backward_beside_activations = 0;  // before the backward lets go of what the unit kept
};

// The most activations, workspace and the pipeline's sent tensors hold together at any point of
// `program`: each action's activation peak (`activations`, from predict_program_memory) with its
// unit's workspace — a backward's workspace peak beside what is left once it has let go of the
// unit's activations, and its first steps beside all of them — and the tensors of `sent_bytes`
// each sent since the rank last received one (a receive means the pipeline has moved on, and the
// next unit action finds those sends done), and `comm_during` (per action; empty: none) of other
// communication buffers. The memory peak of a step is this beside the states, which do not change
// within it.
int64_t predict_transient_peak(const Program& program, const ProgramMemory& activations,
                               const std::vector<UnitWorkspace>& workspace, int64_t sent_bytes,
                               const std::vector<int64_t>& comm_during = {});

}  // namespace tessera::exec
