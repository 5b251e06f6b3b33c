#pragma once
// Activation checkpointing over a chain of units: the model every recompute policy and solver
// shares, and the one simulator that defines what a schedule costs.
//
// The model. One microbatch runs through units 0..n-1; unit n-1 computes the loss and has no
// output. Unit i reads x_i (x_0 comes from the caller, x_{i+1} is unit i's output) and, when its
// forward keeps everything, holds `own_bytes` more until its backward. Checkpointing trades time
// for memory by choosing, for every forward, what survives it (Rotor's F_all, F_ck and F_∅):
//   Keep::All      the unit's activations stay (its input x_i with them): its backward can run;
//   Keep::Input    only x_i stays: the unit must be recomputed before its backward;
//   Keep::Nothing  only the output stays: x_i is gone and can only come back from an earlier input.
// and, for a unit with something cheap to rebuild (rebuildable_bytes > 0: a block's norm outputs and
// MLP activation, which selective recomputation drops), a fourth, finer choice:
//   Keep::Selective  the activations but the rebuildable part stay (its input with them); the
//                  backward rebuilds that part first, at rebuild_time, holding rebuild_bytes more.
// Keep::Selective on every block is the selective policy; mixing it with the others per unit is what
// Checkmate's graph of a unit's kept and rebuildable parts finds (memory/remat/chain_checkmate.h).
// A schedule is a forward phase (every unit once, in order, the loss unit keeping everything) and
// a backward phase: the backwards from n-1 down to 0 with recomputing forwards between them.
//
// Why one simulator with exact rules: the training interpreter executes these schedules through
// the counting allocator and a test holds its measured peak equal to simulate()'s byte for byte,
// and the planner and the solvers (optimal.h) are judged by the same numbers. So the rules below
// are the contract, not an approximation:
//  - Live bytes are the input_bytes of every present x_i (x_0 included) plus the own_bytes of every
//    unit whose activations are kept. b is the lowest unit whose backward is done (n at first).
//  - Forward(i, keep) needs i < b, x_i present, unit i's activations not kept, and x_{i+1} absent
//    when i + 1 < b (recomputing a tensor that is still stored is a schedule bug). Its peak is live
//    + own_bytes_i + output_bytes_i + forward_extra_bytes_i: the output is always allocated, even
//    when nobody will read it, and forward_extra_bytes is what the forward holds only while it runs
//    (e.g. a tensor a selective policy drops as soon as the next op has read it).
//    Afterwards x_{i+1} is present if i + 1 < b (a gradient already flows below b, so an output
//    there is dropped at once); All keeps the activations, Input drops them but keeps x_i,
//    Nothing drops both. Selective needs rebuildable_bytes_i > 0; it keeps own_bytes_i −
//    rebuildable_bytes_i, and its forward's peak counts that instead of own_bytes_i, plus
//    selective_forward_extra_bytes_i (what it holds until the ops reading a dropped tensor ran).
//  - Backward(i) needs i == b - 1 and unit i's activations kept. Its peak is live +
//    backward_extra_bytes_i (what the backward allocates and frees), plus rebuild_bytes_i when a
//    Selective forward kept them. Afterwards the activations and x_i are gone and b = i.
//  - The schedule is complete when b == 0. Its time is the forward_time of every Forward
//    (recomputations included) plus every backward_time, plus rebuild_time_i for every backward
//    of activations a Selective forward kept.
// Gradients are not counted: they are the same for every schedule, so the caller adds them.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::memory {

struct ChainUnit {
  int64_t input_bytes = 0;           // x_i
  int64_t own_bytes = 0;             // kept by a Keep::All forward besides its input and output
  int64_t output_bytes = 0;          // x_{i+1}, so equal to the next unit's input_bytes; 0 for the loss unit
  int64_t backward_extra_bytes = 0;  // allocated at the start of its backward, freed by its end
  int64_t forward_extra_bytes = 0;   // held during its forward only, on top of what it keeps and its output
  double forward_time = 0;
  double backward_time = 0;
  // Keep::Selective's part (all 0 for a unit without one): of own_bytes, what it drops; what its
  // backward holds while rebuilding that; what its forward holds the while; the rebuild's time.
  int64_t rebuildable_bytes = 0;
  int64_t rebuild_bytes = 0;
  int64_t selective_forward_extra_bytes = 0;
  double rebuild_time = 0;
};

enum class Keep : std::uint8_t { All, Input, Nothing, Selective };
std::string_view keep_name(Keep keep);  // "all", "input", "nothing", "selective"

struct ChainOp {
  enum class Kind : std::uint8_t { Forward, Backward };
  Kind kind = Kind::Forward;
  int unit = 0;
  Keep keep = Keep::All;  // Forward only

  static ChainOp forward(int unit, Keep keep) { return {Kind::Forward, unit, keep}; }
  static ChainOp backward(int unit) { return {Kind::Backward, unit, Keep::All}; }
  bool is_forward() const { return kind == Kind::Forward; }
  // Equal ops run the same thing: a backward's unused keep does not make two backwards differ.
  bool operator==(const ChainOp& o) const {
    return kind == o.kind && unit == o.unit && (kind == Kind::Backward || keep == o.keep);
  }
};
std::string describe(const ChainOp& op);  // "forward(3, keep=input)", "backward(3)"

struct ChainSchedule {
  // One Forward per unit, units 0..n-1 in order, ending with Forward(n-1, All).
  std::vector<ChainOp> forward;
  // Starts with Backward(n-1) and holds Backward(n-1), ..., Backward(0) in that order; its
  // Forwards are recomputations.
  std::vector<ChainOp> backward;

  bool operator==(const ChainSchedule&) const = default;
};

// Throws tessera::Error unless the chain is usable: at least one unit, sizes and times not
// negative, and unit i's output_bytes equal to unit i+1's input_bytes (the same tensor).
void check_chain(std::span<const ChainUnit> units);

// One op as the simulator saw it. peak_bytes is the moment compared with a budget (and the one
// the interpreter's allocator must reach exactly); live_after is what stays once the op is done.
struct ChainStep {
  ChainOp op;
  bool recompute = false;  // a Forward of the backward phase
  bool rebuild = false;    // a Backward that first rebuilds what a Selective forward dropped
  int64_t peak_bytes = 0;
  int64_t live_after = 0;
};

struct ChainSimulation {
  int64_t peak_bytes = 0;           // the highest peak_bytes of all ops
  int64_t after_forward_bytes = 0;  // live at the end of the forward phase
  double time = 0;
  int recomputed_forwards = 0;
  int rebuilds = 0;  // backwards that first rebuilt what a Selective forward dropped
};

// Both throw tessera::Error naming the phase, position and op when the schedule breaks a rule
// above or leaves a backward undone.
std::vector<ChainStep> simulate_steps(std::span<const ChainUnit> units, const ChainSchedule& schedule);
ChainSimulation simulate(std::span<const ChainUnit> units, const ChainSchedule& schedule);

}  // namespace tessera::memory
