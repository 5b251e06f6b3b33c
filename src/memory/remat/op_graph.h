#pragma once
// A graph of operations recorded from running units (core/op_trace.h): the forward and the backward
// of a run of consecutive units, each op one node, each edge a tensor an op read that an earlier op
// of the run wrote. The graph comes from the modules themselves: nothing here knows what a block
// computes.
//
// Nodes, in the order the ops ran: a source node for every tensor read before any op of the run
// wrote it (the first unit's input, the gradient from above), then one node per op. An op's node
// reads the latest version of every tensor argument it did not only write (an op that writes a
// storage in place reads its earlier version and makes a new one); it costs the op's time, and its
// output is every activation storage it wrote. Parameters, their gradients and working copies are
// not values of the graph (MemoryTag Params, Grads, Optimizer, WeightStash, WorkingCopies): they
// are resident whatever the schedule. A backward op's outputs (gradients) count 0 bytes, as in the
// unit chain's model (memory/chain.h), so that the two count the same things; which forward values
// each backward op reads is what it read when it ran.
//
// Source nodes cost more than all the ops together, so no optimal schedule recomputes them; the
// caller subtracts `pinned_cost` once per source (`sources`).
//
// The unit-level truth is the saved tensors (nn::SavedTensor, given as storages): the forward nodes
// a unit's backward reads must be exactly the producers of what the unit saved (besides its input),
// or the graph is refused, naming the op.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/op_trace.h"
#include "memory/chain.h"
#include "memory/remat/graph.h"

namespace tessera::memory::remat {

// One unit of a recorded run: the trace's ops [forward_begin, forward_end) ran its forward and
// [backward_begin, backward_end) its backward; what it read, wrote as its output, and saved.
struct TracedUnit {
  int forward_begin = 0, forward_end = 0;
  int backward_begin = 0, backward_end = 0;
  const Storage* input = nullptr;
  const Storage* output = nullptr;
  std::vector<const Storage*> saved;
};

// A unit's nodes in the graph.
struct OpGraphUnit {
  int input = 0, output = 0;                 // the nodes of its input and of its output
  int forward_first = 0, forward_last = -1;  // its forward's op nodes, in order
  int backward_first = 0, backward_last = -1;
  std::vector<int> saved;  // the forward nodes its backward reads, ascending (its input not among them)
};

struct OpGraph {
  Graph graph;
  std::vector<OpGraphUnit> units;
  std::vector<int> node_of_op;  // the trace's op i is node node_of_op[i]
  int sources = 0;
  double pinned_cost = 0;  // each source node's cost
  double op_cost = 0;      // every op once: the cost of a schedule that recomputes nothing
  // The same units as a chain for Rotor (memory/optimal.h), with the same costs: own_bytes the
  // forward nodes its backward reads, output_bytes its output's node, forward_extra_bytes the most
  // its forward holds at one op besides those (values no backward reads, e.g. a projection's output
  // before the residual add), backward_extra_bytes 0 (gradients count 0 here).
  std::vector<ChainUnit> chain;
};

// Units in the order they ran forward; their backwards ran after every forward. op_costs (one per
// trace op; empty: the seconds the trace measured) are the ops' costs, in the unit the caller wants (the trace
// measures seconds). Throws tessera::Error when the units' op ranges do not cover the trace in that order,
// or when a backward's reads and the unit's saved tensors disagree.
OpGraph op_training_graph(const OpTrace& trace, std::span<const TracedUnit> units, std::span<const double> op_costs = {});

// A chain schedule of the units (memory/chain.h) as a schedule of the op graph, pruned
// (prune_schedule): each unit forward computes its op nodes and keeps what the chain keeps (all its
// saved nodes, its input, or neither), each backward its op nodes, in the stages of those nodes.
// Every op runs at most as often as the chain schedule runs its unit, so the cost is at most the
// chain's time (plus the sources' pinned costs); the peak is the op graph's own measure, at most the
// chain's where the chain's forward_extra_bytes cover what its forward holds at once. CBC starts
// from it (SolveOptions::start), so Checkmate over the op graph finds nothing costlier than Rotor at
// a budget Rotor's schedule meets here.
Schedule op_graph_schedule(const OpGraph& graph, const ChainSchedule& schedule);

// The op's name without its namespace ("layernorm_forward" for "ops::layernorm_forward").
std::string short_op_name(const char* name);

}  // namespace tessera::memory::remat
