#pragma once
// The recompute policies' schedules over a chain of units (config::RecomputePolicy names them), and
// the one entry point the training interpreter and the planner call.
//
//   selective  changes the chain, not the schedule: the caller builds the chain with the smaller
//              own_bytes and the backward_extra_bytes (unit_chain.h), and the schedule is none's.
//   full       every_k with k = 1: each unit's input is stored, everything else recomputed.
//   every_k    Chen et al.'s segments of k units, the usual sqrt(n) checkpointing when k ~ sqrt(n).
//   optimal    the fastest (persistent) schedule within a memory budget (optimal.h).
//   dtr        Dynamic Tensor Rematerialization's run-time rule within the same budget (dtr.h): a
//              greedy baseline that plans nothing ahead, to show what planning buys.
//   checkmate  Checkmate's MILP over the chain's graph within the same budget, solved with COIN-OR CBC
//              (remat/chain_checkmate.h); planned by exec::plan_recompute, which links the solver.
#include <cstdint>
#include <span>

#include "config/recompute_policy.h"
#include "memory/chain.h"

namespace tessera::memory {

ChainSchedule none_schedule(int units);
// Units 0..n-2 (the loss unit stays out) are cut from the start into segments of k (the last one
// may be shorter; k >= n - 1 makes one segment). The forward phase stores each segment's first
// input and drops everything else; the backward phase recomputes each segment, last first,
// keeping everything, and runs its backwards.
ChainSchedule every_k_schedule(int units, int k);
ChainSchedule full_schedule(int units);

// Checkmate is refused here (see above). every_k is read for EveryK only, budget_bytes for Optimal and Dtr only (the activation memory the
// schedule may peak at, x_0 included; see optimal_schedule and dtr_schedule).
ChainSchedule plan_recompute(config::RecomputePolicy policy, std::span<const ChainUnit> units, int every_k,
                             int64_t budget_bytes);

}  // namespace tessera::memory
