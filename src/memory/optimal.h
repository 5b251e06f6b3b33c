#pragma once
// The fastest persistent recompute schedule of a chain (chain.h) within an activation budget: a
// dynamic program in the spirit of Rotor (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova 2019,
// "Optimal checkpointing for heterogeneous chains"), written against chain.h's exact rules.
//
// Persistent schedules, Rotor's class: an input that a forward keeps (Input or All) stays until
// its unit's backward; only an input no forward kept yet may be consumed by a Keep::Nothing.
//
// Why a DP over segments. opt(s, t, m) is the least time to finish units s..t when x_s is stored,
// the gradient of x_{t+1} is there (everything right of t is done), units s..t hold nothing yet,
// and at most m bytes may be live above what the caller holds (x_s included). A persistent
// schedule of the segment starts with unit s's forward, and what it keeps decides the rest:
//  (A) Forward(s, All): x_{s+1} and unit s's activations stay while opt(s+1, t) runs with
//      m - own_s - in_{s+1}, then Backward(s). Peaks: own_s + out_s during the forward,
//      own_s + backward_extra_s during the backward.
//  (B) Forward(s, Input), Forward(s+1 .. s'-1, Nothing) for some s < s' <= t, which stores x_{s'}:
//      opt(s', t) runs with m - in_{s'}, and then opt(s, s'-1) with the whole m again (x_{s'} was
//      dropped by Backward(s')). The run peaks at max over k of [k > s] in_k + own_k + out_k.
// Any other order holds memory longer for the same work. The tests hold the DP equal to an
// exhaustive search of persistent schedules on every chain of up to 8 units.
//
// Why not every schedule. Outside the class, a schedule may hold a small x_s through the peak and
// advance it to a larger x_{s'} later with Keep::Nothing forwards, recomputing x_s from an earlier
// input afterwards. On random chains of up to 8 units that is faster in ~0.4% of (chain, budget)
// pairs, by at most ~5%; solving for it needs a third segment index, O(n^4 M) time and O(n^3 M)
// memory (gigabytes at 100 units). It needs inputs of different sizes: when x_1..x_{n-1} have one
// size (a transformer's blocks, x_0 possibly smaller), the tests find the DP equal to the
// exhaustive search of all schedules, and the least budget always was the same.
//
// Memory is discretised: every size is rounded up to a multiple of a quantum q, so the DP's peaks
// are upper bounds and its schedule's exact peak never exceeds the budget. The automatic q makes
// none's peak (the most a budget can usefully be) span 2000 slots (fewer past ~140 units, to bound
// the tables' memory), and is 1 when sizes are small integers. Rounding can make the DP miss a
// schedule that only just fits, so the simple policies (none, every_k for every k) are also tried
// at their exact peaks: optimal is never slower than any of them.
//
// Cost: n^2/2 tables of at most budget/q entries, each filled by O(n) vectorised passes; 100
// units with 2000 slots take about 0.1 s and 40 MB.
#include <cstdint>
#include <span>

#include "memory/chain.h"

namespace tessera::memory {

// The quantum optimal_schedule and minimum_budget use when given 0.
int64_t optimal_quantum(std::span<const ChainUnit> units);

// The smallest budget (bytes, x_0 included) for which optimal_schedule succeeds with this quantum
// (0: automatic). With quantum 1 it is the least peak of any persistent schedule, which on every
// chain the tests search is also the least peak of any schedule at all.
int64_t minimum_budget(std::span<const ChainUnit> units, int64_t quantum = 0);

// The fastest persistent schedule whose simulated peak (simulate(), x_0 included) is at most
// budget_bytes, up to the quantum's rounding. A budget of none's peak or more gives none's
// schedule; one below minimum_budget is refused with a message naming that minimum. quantum 0
// chooses it automatically.
ChainSchedule optimal_schedule(std::span<const ChainUnit> units, int64_t budget_bytes, int64_t quantum = 0);

}  // namespace tessera::memory
