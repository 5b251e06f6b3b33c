#pragma once
// Dynamic Tensor Rematerialization (Kirisame et al. 2021, memory/dtr.h for the unit chain) over a general graph
// (graph.h), emitted as a Checkmate schedule: a planner's schedule for any budget DTR meets, cheap to find, which
// the MILP (milp.h) can start from where no other schedule fits.
//
// The run. The nodes execute in their order (the program order); stage t is node t's first computation. Before
// it, every input that is not resident is rematerialized, recursively: rerunning a producer first needs its own
// missing inputs. When an allocation would exceed the budget, DTR evicts the resident, unlocked, evictable
// tensor with the least
//   h = c / (m · s),
// m its bytes, s the time since it was last produced or read on the program's clock (the sum of the costs of
// the nodes run so far, rematerializations included), c the equivalence-class cost of memory/dtr.h: the cost of
// its producer plus that of every non-resident neighbour evicting it would leave to recompute (its missing
// inputs, their missing inputs, and the evicted readers still needed, transitively). A tensor whose c is 0 is
// evicted first. A tensor is freed once no later node of the program reads it (graph.h's rule); it can still be
// recomputed if a later rematerialization needs it.
//
// Locks. A stage's rematerializations are found before it starts: node t and the missing inputs of what it
// computes, transitively. Every resident input of one of them is locked until its last reader of the stage has
// run, and each is computed once, in index order. That is graph.h's stage (its computed nodes run in index order,
// each at most once), and a little stricter than the paper's DTR, which locks an op's inputs only while that op
// runs and may evict a tensor a sibling rematerialization then needs back.
//
// The schedule. Stage t computes what DTR computed for node t (R[t]); S[t] is what was resident when the stage
// began. It is then pruned (graph.h's prune_schedule). What the simulator holds at each point of a stage is a
// subset of what DTR held there (DTR keeps a tensor at least until its last reader of the stage, and keeps
// into the next stage exactly what S says), so simulate_schedule's peak never exceeds DTR's own count, and its
// cost is at most DTR's compute. The emitted schedule is nevertheless the judge: it is simulated, and a
// schedule above the budget would be refused like a run that does not fit.
//
// Pinned nodes are never evicted: a graph's inputs (op_graph.h's sources, chain_graph's x_0) carry a cost above
// every schedule's so that no optimal schedule recomputes them, and evicting one would make DTR pay it.
#include <cstdint>
#include <optional>
#include <vector>

#include "memory/remat/graph.h"

namespace tessera::memory::remat {

struct GraphDtrOptions {
  // pinned[i] != 0: node i is never evicted (it is still freed after its last reader). Empty: pinned_inputs().
  std::vector<std::uint8_t> pinned{};
};

// The default pins: every node without inputs whose cost is above the costs of all nodes with inputs together.
std::vector<std::uint8_t> pinned_inputs(const Graph& graph);

struct GraphDtrSchedule {
  Schedule schedule;       // pruned
  double cost = 0;         // simulate_schedule's, for the schedule above
  int64_t peak_bytes = 0;  // likewise
  int computations = 0;    // likewise: node runs, rematerializations included
  double dtr_cost = 0;     // what DTR computed before pruning (>= cost)
  int64_t held_peak = 0;   // the most DTR held at an allocation (>= peak_bytes)
  int evictions = 0;
};

// DTR's run of the graph within budget_bytes, as a schedule; nullopt when DTR cannot meet the budget (an
// allocation that does not fit with every evictable tensor evicted, at the latest a node whose inputs and
// output exceed the budget). Throws tessera::Error for a broken graph (check_graph) or pins of the wrong size.
std::optional<GraphDtrSchedule> graph_dtr_schedule(const Graph& graph, int64_t budget_bytes,
                                                   const GraphDtrOptions& options = {});

}  // namespace tessera::memory::remat
