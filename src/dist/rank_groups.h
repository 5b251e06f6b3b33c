#pragma once
// The rank groups a parallel layout implies: pure functions, no MPI.
//
// Conventions (Megatron-LM's order):
//  - world size = dp x pp x tp. Ranks are numbered tp fastest, then dp, then pp slowest:
//      rank = tp_index + tp x (dp_index + dp x pp_index)
//    so a tensor-parallel group is tp adjacent ranks (on one node, where the bandwidth is), and a
//    pipeline stage is a contiguous block of dp x tp ranks.
//  - Expert parallelism is carved out of data parallelism (as in DeepSpeed-MoE and Megatron):
//    ep divides dp, and each data-parallel group splits into dp/ep expert-parallel groups of ep
//    consecutive data-parallel ranks, which hold different experts and exchange tokens by
//    all-to-all. Ranks at the same position in those groups hold the same experts and form the
//    expert-data-parallel groups (size dp/ep) over which expert gradients are reduced.
//      ep_index = dp_index % ep,  edp_index = dp_index / ep
//  - Sequence parallelism (Megatron-SP) splits the sequence across the tensor-parallel group, so
//    it uses the tp groups and requires tp > 1.
// Only the factors of the layout matter here (dp, pp, tp, ep); its batch and schedule do not.
#include <vector>

#include "config/parallel_layout.h"

namespace tessera::dist {

// The dimensions live with the layout; these names keep dist's callers short.
using config::kMeshDims;
using config::mesh_dim_name;
using config::MeshDim;

// Where a rank sits in the layout.
struct Coordinates {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  int ep = 0;   // dp % ep: position inside the expert-parallel group
  int edp = 0;  // dp / ep: which expert-parallel group of the data-parallel group

  int index(MeshDim dim) const;  // position of the rank inside its group of `dim`
};

Coordinates coordinates(const config::ParallelLayout& layout, int rank);
int rank_of(const config::ParallelLayout& layout, int dp, int pp, int tp);

// Every group of `dim`, each as world ranks in group-rank order; together they cover every rank
// exactly once. Groups are listed in increasing order of their lowest rank.
std::vector<std::vector<int>> rank_groups(const config::ParallelLayout& layout, MeshDim dim);

// The group of `dim` that holds `rank`.
std::vector<int> group_of(const config::ParallelLayout& layout, MeshDim dim, int rank);

}  // namespace tessera::dist
