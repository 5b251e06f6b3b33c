#pragma once
// memory.recompute: the activation-checkpointing policy a run uses and the planner predicts with,
// one type for both so that the planner weighs exactly what would run. The schedules themselves are
// in src/memory (recompute_policy.h); the names live with the config so that the config reader and
// the compatibility matrix can speak of them.
//
//   none       keep everything; the fastest schedule and the largest peak.
//   selective  after Korthikanti et al.'s selective recomputation: the cheap-to-recompute parts are
//              recomputed inside each unit's backward. What those parts are depends on whose tensors
//              are counted: this engine drops its norm outputs and the MLP's activation (its tiled
//              attention never stores the scores); Megatron's accounting of a published run drops
//              the attention core's (plan::ActivationAccounting says which).
//   full       every_k with k = 1: each unit's input is stored, everything else recomputed.
//   every_k    Chen et al.'s segments of k units, the usual sqrt(n) checkpointing when k ~ sqrt(n).
//   optimal    the fastest (persistent) schedule within a memory budget.
//   dtr        Dynamic Tensor Rematerialization's run-time rule within the same budget.
//   checkmate  Checkmate's MILP over the chain's graph within the same budget.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::config {

enum class RecomputePolicy : std::uint8_t { None, Selective, Full, EveryK, Optimal, Dtr, Checkmate };

std::string_view recompute_policy_name(RecomputePolicy policy);  // "none", "selective", "full", "every_k", "optimal", "dtr", "checkmate"
std::optional<RecomputePolicy> find_recompute_policy(std::string_view name);
RecomputePolicy parse_recompute_policy(std::string_view name);   // throws with the list of names
// "none, selective, full, every_k, optimal, dtr, checkmate": for messages that list the choices.
std::string recompute_policy_names();

// every_k's segment length when memory.recompute_every is 0: ceil(sqrt(n)) for the n blocks one
// chain holds (a pipeline stage's, or a model chunk's under interleaving; the whole model without a
// pipeline). The runtime and the planner both take it from here.
int default_every_k(int blocks);

// optimal, dtr and checkmate: the policies that take an activation budget (memory.activation_budget_mb).
constexpr bool recompute_takes_budget(RecomputePolicy policy) {
  return policy == RecomputePolicy::Optimal || policy == RecomputePolicy::Dtr || policy == RecomputePolicy::Checkmate;
}

}  // namespace tessera::config
