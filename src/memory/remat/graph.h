#pragma once
// Rematerialization over a general computation graph, after Checkmate (Jain, Jain, Nrusimha, Gholami, Abbeel,
// Keutzer, Stoica, Gonzalez 2020, "Checkmate: Breaking the Memory Wall with Optimal Tensor
// Rematerialization"): the graph, the schedule, and the one simulator that defines what a schedule costs. The
// MILP (milp.h) and the exhaustive search (exhaustive.h) are both judged by simulate_schedule().
//
// The graph. Nodes 0..n-1 in a topological order: every input of node k is a node j < k. A node has a compute
// cost (time) and the bytes of its one output. Forward and backward ops are both nodes: a backward node reads
// forward outputs and the gradient from above like any input.
//
// The schedule (frontier-advancing, the paper's class). Stage t computes node t, after recomputing what it
// needs: R[t][i] = 1 when node i is computed in stage t, S[t][i] = 1 when node i's output is kept in memory
// from stage t-1 into stage t. So R is lower-triangular with R[t][t] = 1 and S strictly lower-triangular
// (S[0] is empty). Within a stage the computed nodes run in index order.
//
// The memory model (the paper's U/FREE accounting, the rules simulate_schedule enforces):
//  - A stage starts with the outputs of S[t] resident.
//  - Computing node k needs each input resident (computed earlier in the stage or kept into it);
//    its output is allocated: the live bytes at that moment are a point of the peak.
//  - Right after node k runs, each of its inputs and its own output is freed unless a node after
//    k that reads it is also computed in this stage, or it is kept into stage t+1 (S[t+1][i]).
//  - Whatever is still resident at the end of a stage and not kept into the next is dropped.
//    An output kept into a stage that nobody reads there stays counted through the stage.
//  - A kept output is never recomputed in the same stage (R[t][i] + S[t][i] <= 1): doing so only
//    costs time and memory, and the paper's accounting would count the output twice.
//  - S[t+1][i] needs node i resident at the end of stage t: computed in it or kept into it.
// The cost of a schedule is the sum of the costs of its computed nodes (recomputations included); its peak is
// the highest live-byte count at any point above.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memory/chain.h"

namespace tessera::memory::remat {

struct GraphNode {
  std::string name;         // for messages only
  double cost = 0;          // time to compute the node once
  int64_t bytes = 0;        // its output
  std::vector<int> inputs;  // earlier nodes whose outputs it reads, each once
};

struct Graph {
  std::vector<GraphNode> nodes;  // in a topological order
  int size() const { return static_cast<int>(nodes.size()); }
};

// Throws tessera::Error naming the node unless: at least one node, costs and sizes finite and not negative,
// every input an earlier node (a later or equal one means a cycle or an order that is not topological), no
// input listed twice.
void check_graph(const Graph& graph);

// users[i]: the nodes reading node i, ascending.
std::vector<std::vector<int>> graph_users(const Graph& graph);

// n x n matrices of 0/1, indexed [stage][node].
using BoolMatrix = std::vector<std::vector<std::uint8_t>>;

struct Schedule {
  BoolMatrix R;  // R[t][i]: node i computed in stage t
  BoolMatrix S;  // S[t][i]: node i's output kept from stage t-1 into stage t
  bool operator==(const Schedule&) const = default;
};

struct ScheduleCost {
  double cost = 0;         // sum of the costs of computed nodes
  int64_t peak_bytes = 0;  // highest live bytes
  int computations = 0;    // number of node runs, recomputations included
};

// Throws tessera::Error naming the stage and node when the schedule breaks a rule above (shape,
// triangularity, an input not resident, a kept output not resident, a kept output recomputed).
ScheduleCost simulate_schedule(const Graph& graph, const Schedule& schedule);

// The schedule that computes only what S needs: node t in stage t, every node kept into stage t+1 that stage
// t does not already hold, and what those read that is not kept, transitively. It is the cheapest valid R for
// S. It is not always the lowest-peak one: a kept output that nobody reads in its stage stays counted through
// the stage, and a needless recomputation of one of its readers would free it early. prune_schedule removes
// such keeps. S is taken as is below the diagonal (S[0] and the diagonal must be empty).
Schedule minimal_recompute(const Graph& graph, const BoolMatrix& S);

// The useful part of a valid schedule: working back from the last stage, only the computations that node t of
// each stage needs and the keeps that a useful computation reads or a useful keep carries on. The result is
// minimal_recompute of its own S, and costs and peaks no more than the input (every output it holds at any
// moment the input holds then too). So a search over S with the minimal R misses no (cost, peak) a schedule
// reaches, and a solver's schedule can be pruned safely. Throws as simulate_schedule does when the input is
// invalid.
Schedule prune_schedule(const Graph& graph, const Schedule& schedule);

// Checkmate's "checkpoint all" baseline: every node computed once, each output kept until the stage of its
// last reader. Its peak is the most any budget usefully needs.
Schedule keep_everything_schedule(const Graph& graph);

// A 64-bit hash (hex) of the node count, costs, sizes and inputs: equal graphs, equal strings.
std::string graph_fingerprint(const Graph& graph);

}  // namespace tessera::memory::remat
