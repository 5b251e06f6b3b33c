#pragma once
// What a mixture-of-experts model (nn/moe.h) adds to the cost model: its parameters per rank
// (experts split over ep, not over tp), its FLOPs (active: the k experts a token is routed to;
// total: all E), and the all-to-all time of expert parallelism. Routing is taken as uniform and
// drop-free, the planner's assumption: each rank sends (ep - 1)/ep of its b·s·k rows away, four
// times per MoE layer and microbatch (dispatch and combine, forward and backward).
//
// The runtime's bytes are exact per routing (tests/parallel/moe_parity_test.cpp holds them to
// the rows each rank actually sent); this is their expectation.
#include <cstdint>

#include "config/model_config.h"
#include "plan/cluster.h"
#include "plan/collectives.h"
#include "plan/layout.h"

namespace tessera::plan {

// MoE blocks among the blocks of pipeline stage `stage` (the planner's even split of the layers).
int moe_layers_in_stage(const config::ModelConfig& m, const Layout& l, int stage);
// Parameters one MoE block holds on a rank beyond a dense block's: E/ep whole experts and the
// router [E, h] in place of the dense MLP's tp share.
double moe_extra_params_per_rank(const config::ModelConfig& m, const Layout& l);
// Parameters of the E/ep whole experts one MoE block holds on a rank: the part of a stage's
// parameters that ZeRO shards over the experts' own data-parallel group (edp = dp / ep).
double moe_expert_params_per_rank(const config::ModelConfig& m, const Layout& l);
// Forward FLOPs of one MoE block's feed-forward for b sequences, all ranks together: the router
// and k expert MLPs per token (active), or all E of them (total).
double moe_ffn_forward_flops(const config::ModelConfig& m, int64_t b, bool total = false);
// Forward FLOPs of a dense block's MLP for b sequences.
double dense_mlp_forward_flops(const config::ModelConfig& m, int64_t b);
// Bytes one rank sends in one all-to-all pass of one MoE block and microbatch.
double moe_all_to_all_pass_bytes(const config::ModelConfig& m, const Layout& l);

// One MoE block's time beyond a dense block's on one rank, per microbatch.
struct MoeLayerTime {
  double forward = 0, backward = 0;          // the experts' GEMMs beyond the dense MLP's, the router
  double forward_comm = 0, backward_comm = 0;  // two all-to-alls each way
};
MoeLayerTime moe_layer_extra_time(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c,
                                  const Placement& groups);

// For the report: the model's parameters, total and read per token, and the all-to-all traffic
// of a step on the busiest stage's rank.
struct MoeSummary {
  int64_t total_params = 0, active_params = 0;
  double all_to_all_bytes_per_step = 0;    // one rank, all MoE blocks of its stage, all microbatches
  double all_to_all_seconds_per_step = 0;
};
MoeSummary moe_summary(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c);

}  // namespace tessera::plan
