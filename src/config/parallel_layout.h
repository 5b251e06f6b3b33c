#pragma once
// The parallel layout: the one description of how a training step is spread over ranks. The mesh
// (dist/) cuts the world into groups by it, the pipeline generators (schedule/) make its
// schedule, and the planner (plan/) predicts its memory and time; none of them keeps a copy of
// these numbers in a type of its own.
//
// Rank order (Megatron-LM's): tp fastest, then dp, then pp slowest, so a tensor-parallel group is
// tp neighbouring ranks and a pipeline stage a contiguous block of dp x tp ranks. Expert
// parallelism is carved out of data parallelism: ep divides dp (dist/rank_groups.h).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::config {

// How a pipeline orders its forwards and backwards (docs/pipeline-schedules.md).
enum class ScheduleKind : std::uint8_t { GPipe, OneFOneB, Interleaved, PipeDream2BW, ZeroBubbleH1 };
inline constexpr std::array<ScheduleKind, 5> kScheduleKinds{ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                                            ScheduleKind::Interleaved, ScheduleKind::PipeDream2BW,
                                                            ScheduleKind::ZeroBubbleH1};

std::string_view schedule_name(ScheduleKind kind);   // "gpipe", "1f1b", "interleaved", "2bw", "zb-h1"
std::string_view schedule_title(ScheduleKind kind);  // "1F1B (PipeDream-Flush)", ...
std::string schedule_kind_names();                   // "gpipe, 1f1b, interleaved, 2bw, zb-h1"
std::optional<ScheduleKind> find_schedule_kind(std::string_view name);
ScheduleKind parse_schedule_kind(std::string_view name);  // throws with the list of names

// The groups a layout cuts the world into. EP groups are ep consecutive data-parallel ranks;
// EDP groups join the ranks holding the same experts (size dp / ep).
enum class MeshDim { DP, PP, TP, EP, EDP };
inline constexpr std::array<MeshDim, 5> kMeshDims{MeshDim::DP, MeshDim::PP, MeshDim::TP, MeshDim::EP, MeshDim::EDP};
std::string_view mesh_dim_name(MeshDim dim);  // "dp", "pp", "tp", "ep", "edp"

struct ParallelLayout {
  int dp = 1;                // data-parallel replicas
  int tp = 1;                // tensor-parallel ranks (Megatron column/row split)
  int pp = 1;                // pipeline ranks
  int virtual_stages = 1;    // v: model chunks per pipeline rank (interleaved schedule)
  bool sp = false;           // sequence parallelism over the tp group (needs tp > 1)
  int ep = 1;                // expert parallelism, carved out of dp (ep divides dp)
  int zero_stage = 0;        // ZeRO 0..3 over the dp group
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int micro_batch = 1;       // b: sequences per microbatch
  int64_t global_batch = 1;  // B: sequences per optimizer step over all dp ranks

  int world_size() const { return dp * tp * pp; }
  // Microbatches each pipeline runs per step: B / (dp * b); 0 while dp or b is not positive.
  int64_t microbatches() const;
  int size(MeshDim dim) const;  // members of one group of `dim`

  // Throws tessera::Error listing every problem of the layout on its own, each with its fix:
  // factors below 1, ep not dividing dp, sp without tp, a ZeRO stage outside 0..3, a global batch
  // that dp x b does not divide, v > 1 on a schedule other than interleaved. Whether a schedule
  // kind can serve (pp, m, v) is the generators' check (pipeline::check_layout_for).
  void validate() const;
  // What a mesh needs: the factors against the ranks there are. Throws, e.g.
  //   "parallel layout does not fit the world: dp 2 × pp 1 × tp 2 = 4 ≠ world size 3 (ep 1 ...)"
  // with the dp that would fit when pp x tp divides the world.
  void validate_world(int world_size) const;
  // "dp 2 × pp 1 × tp 2 (ep 1, sequence parallel off, ZeRO 0, 1f1b with v 1, global batch 8 in microbatches of 1)"
  std::string describe() const;

  bool operator==(const ParallelLayout&) const = default;
};

}  // namespace tessera::config
