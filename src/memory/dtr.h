#pragma once
// Dynamic Tensor Rematerialization (Kirisame, Lyubomirsky, Haan, Brennan, He, Roesch, Chen, Tatlock
// 2021, "Dynamic Tensor Rematerialization") as a recompute policy of a chain (chain.h).
//
// DTR plans nothing ahead: it runs the program, and whenever an allocation would push memory past
// the budget it evicts the resident evictable tensor with the smallest
//   h(t) = c(t) / (m(t) · s(t)),
// m its bytes, s the time since it was last used, and c the compute it would take to bring it back.
// c is the paper's equivalence-class variant h_DTR^eq: the forward time of every distinct op that
// produced t or a tensor of its evicted neighbourhood (the tensors reachable from t through evicted
// ones in the dataflow graph, both ways), since evicting t makes that whole neighbourhood cost more
// to rematerialize. We compute the neighbourhood exactly where the paper keeps a union-find that
// never splits: a chain has a handful of tensors, and exactness keeps the rule one reading. A
// tensor read while evicted is rematerialized by rerunning its producer, recursively from the
// nearest resident ancestor.
//
// One departure from that sum, where it charges twice. A forward has two outputs, x_{i+1} and A_i;
// once A_i is evicted, the forward that will bring A_i back brings x_{i+1} too, and when x_i is
// resident that one forward is all a rebuild of x_{i+1} runs. Evicting x_{i+1} then adds no
// compute (c = 0), where the sum charged it forward(i), which A_i already owes, and forward(i+1),
// which A_{i+1} (evicted: x_{i+1} is evictable only then) owes as well. This is what kept DTR one
// block forward behind Checkmate at some budgets: needing a few bytes more it evicted another
// block's activations (one forward) rather than an input sitting between two evicted blocks (none).
// Only the one-forward case is free: where x_i is evicted too, the rebuild reruns a chain of
// forwards that each keep their activations long before their backward needs them, and costing
// such inputs nothing makes DTR drop every input and thrash (GPT-2 124M's chain of whole units,
// 400 budgets: at worst 1.75 times optimal's extra compute, above 1.3 at 64, against 1.33 and 3
// with this rule and 1.5 and 8 with the sum everywhere); there the neighbourhood's sum stands.
//
// Why a simulation gives the run-time rule exactly. On a chain every op, its order (the forward
// pass, then each backward after whatever it needs), its sizes and its times are known before the
// step runs, so DTR's choices are a deterministic function of the chain and the budget: we replay
// them here with the clock of chain.h's times (s is measured on it) and emit the ops DTR ran as a
// ChainSchedule the interpreter executes bitwise like any other.
//
// Why evictions become keep choices. The tensors are x_i (unit i's input, x_{i+1} its output), A_i
// (what Keep::All keeps besides x_i) and, for a unit with a rebuildable part, R_i, that part of A_i
// (chain.h's Keep::Selective); Forward(i) produces A_i and x_{i+1}, and A_i is read by Backward(i)
// only. So evicting A_i at any moment before its backward is the same as having run its last
// Forward(i) with Keep::Input: nobody read A_i in between. Evicting R_i alone makes that forward
// Keep::Selective, and its backward rebuilds R_i (c is the rebuild's time, which makes R_i the first
// thing DTR evicts on a transformer: cheap to bring back and large). Likewise x_i (once A_i is gone)
// is read only by a Forward(i) or Backward(i), so evicting it turns its last Forward(i) from Input
// into Nothing. Each eviction is such a retroactive fix-up of one recorded op; it only drops tensors
// earlier, so the emitted schedule's simulated peak (simulate()) is at most what DTR held, and its
// time is exactly DTR's compute. x_0 is pinned: nothing can recompute it.
//
// Two points where a chain is stricter than DTR's tensors. x_i is evictable only while A_i is gone
// (chain.h keeps A_i with its input, and the backward needs both), and rerunning Forward(i) to bring
// back x_{i+1} while A_i is still resident first drops A_i (chain.h forbids a forward over kept
// activations); the rerun keeps A_i again, so memory and time are the same as DTR rerunning the op
// for its missing output.
//
// Why DTR can beat optimal.h. An eviction may drop an input an earlier forward kept, so DTR's
// schedules can leave Rotor's persistent class (optimal.h): on chains whose inputs differ in size
// it is then, rarely, faster than the optimal persistent schedule, never faster than an exhaustive
// search over all schedules (the tests hold both). On a transformer's chain of whole units it is
// slower; with the blocks' rebuildable parts, which Rotor's dynamic program does not choose among,
// it keeps blocks selectively and is mostly faster than Rotor, and is held to Checkmate, which plans
// over the same parts (docs/rematerialization.md).
//
// DTR can thrash. Below some budget an op cannot fit even with everything evictable evicted, and
// near it DTR recomputes far more than a planned schedule (optimal.h) would: it sees only the
// past. Its greedy choices are also not monotone in the budget, so the least budget it meets is
// found by bisection over the simulation and a budget above it may still fail; both are named in
// the refusal.
#include <cstdint>
#include <span>
#include <string>

#include "memory/chain.h"

namespace tessera::memory {

struct DtrRun {
  bool fits = false;         // every op fit within the budget
  std::string failure;       // when not: the op that did not fit and what it needed
  ChainSchedule schedule;    // the ops DTR ran, with keeps fixed up by its evictions (complete when fits)
  int64_t held_peak = 0;     // the most DTR held at any op (>= the schedule's simulated peak)
  double time = 0;           // forwards (rematerializations included) plus backwards
  int evictions = 0;         // tensors evicted, A_i, R_i and x_i alike
  int rematerialized_forwards = 0;  // forwards of the backward phase
};

// DTR's run of the chain within budget_bytes (x_0 included), never throwing for a small budget.
DtrRun dtr_run(std::span<const ChainUnit> units, int64_t budget_bytes);

// The least budget dtr_run fits, by bisection between 0 and none's peak (which always fits). With
// at_least > 0, the least fitting budget of at least that many bytes the bisection finds instead.
int64_t dtr_minimum_budget(std::span<const ChainUnit> units, int64_t at_least = 0);

// DTR's schedule within budget_bytes; throws tessera::Error naming the least budget DTR meets (and
// the next one above budget_bytes, where DTR's non-monotone choices make them differ).
ChainSchedule dtr_schedule(std::span<const ChainUnit> units, int64_t budget_bytes);

}  // namespace tessera::memory
