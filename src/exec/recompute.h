#pragma once
// Activation checkpointing for the model's units: the chains the recompute policies and the
// optimal solver (src/memory) work on, built from the model's per-unit activation bytes
// (config::unit_activation_bytes) and forward times, and the activation peak they predict.
//
// A stage's chain is its units without the embedding (its saved state is the token ids, kept
// throughout), the head last on the last stage; on the other stages a unit of no bytes that stands
// for the send closes it, so that the stage's last block is checkpointed like the others. Under the selective policy each block keeps less
// (Block::forward with keep_recomputable false) and allocates that much again at the start of its backward.
//
// The prediction is exact for a rank that holds every stage of a one-stage schedule (plain
// training with gradient accumulation, GPipe or 1F1B at p = 1): with R the bytes one microbatch
// keeps after its forward and P its peak (memory::simulate, plus the embedding's token ids), a
// schedule with I microbatches alive at once peaks at (I − 1)·R + P, because each backward runs
// while the other microbatches sit at R. Tests hold the allocator's measured peak equal to it.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "exec/program.h"
#include "memory/recompute_policy.h"
#include "config/activation_bytes.h"
#include "nn/gpt.h"

namespace tessera::exec {

// Where the activations a unit keeps from its forward wait for its backward (memory.offload_activations).
enum class ActivationOffloadMode : uint8_t {
  None,  // in compute memory
  Nvme,  // every unit that keeps them, but the head (whose backward follows its forward at once), in the nvme tier
  // With the optimal policy: which units to offload and which to recompute, planned together under
  // the budget (plan_recompute): offloading the first k units for each k, each with the fastest
  // recompute schedule whose activation peak — walked with offloading's own rules — fits, and the
  // cheapest of them in recomputation plus the disk time the step cannot hide.
  Auto,
};
ActivationOffloadMode parse_activation_offload(std::string_view name);  // "none", "nvme", "auto"

struct RecomputeOptions {
  config::RecomputePolicy policy = config::RecomputePolicy::None;
  int every_k = 0;           // segment length for every_k; 0: ⌈√n⌉ for the n blocks of each stage (config::default_every_k)
  int64_t budget_bytes = 0;  // optimal and dtr: the activation peak allowed, whole microbatch (token ids included)
  ActivationOffloadMode offload = ActivationOffloadMode::None;
  // Auto: the disk's write and read bandwidth (bytes/s) that offloading's time is reckoned at.
  double disk_write_bytes_per_second = 0;
  double disk_read_bytes_per_second = 0;
  // Checkmate: CBC's time limit per stage, and where solutions are cached (empty: nowhere).
  double solver_seconds = 60;
  std::filesystem::path solver_cache_dir{};
};

// What the joint plan chose for one stage (ActivationOffloadMode::Auto): the recompute schedule's
// cost, the offloaded units, and the time the disk adds, in the unit times' units.
struct JointPlanChoice {
  int offloaded_units = 0;
  double recompute_time = 0;
  double exposed_io_time = 0;
  int64_t activation_peak = 0;
};

// Forward and backward time of every unit (seconds, or any unit of time: only ratios matter).
struct UnitTimes {
  std::vector<double> forward;
  std::vector<double> backward;
  std::vector<double> rebuild;  // what a block's backward takes to rebuild what a selective forward dropped
};
// Times from FLOPs alone (2 per multiply-add of every matmul of the unit; backward twice that; the
// rebuild config::rebuild_flops): used when nothing was measured, and by tests.
UnitTimes nominal_unit_times(const config::ModelConfig& config, int B, int T);
// Each unit's forward timed on a microbatch of zeros [B, T] (the median of a few runs after a
// warm-up), with the weights `params` gives; backward taken as twice the forward (its matmuls'
// FLOPs; every schedule runs each backward once, so it does not change which schedule is best), the
// rebuild as the FLOP model's share of the measured forward.
UnitTimes measure_unit_times(nn::GPT& model, nn::ParameterAccess& params, MemoryAccountant& memory, int B, int T);

// The recompute chain of `stage` for microbatches [B, T] on a rank of `tp` tensor-parallel ranks,
// with sequence parallelism when `sp`, activations in `activations`.
std::vector<memory::ChainUnit> stage_chain(const config::ModelConfig& model, const StagePlan::Stage& stage, int B,
                                           int T, bool selective, const UnitTimes& times, int tp = 1, bool sp = false,
                                           DType activations = DType::F32);

// Sets every stage's recompute schedule, selective flag and offloaded units. The optimal, dtr and
// checkmate policies' budget is the whole microbatch's activation peak; the embedding's token ids come
// off it first. Checkmate weighs recomputation by the FLOP model's unit times whatever `times` says:
// its solutions are cached by the graph, which must then depend on the model's shape, the
// microbatch and the budget only, not on timings that differ from run to run.
void plan_recompute(StagePlan& plan, const config::ModelConfig& model, int B, int T, const RecomputeOptions& options,
                    const UnitTimes& times, int tp = 1, bool sp = false, DType activations = DType::F32);

struct ActivationPrediction {
  int64_t per_microbatch_peak = 0;   // P
  int64_t per_microbatch_after_forward = 0;  // R
  int64_t peak = 0;                  // (alive − 1)·R + P
};
// For a plan of one stage (a rank holding the whole model), `alive` microbatches at once, on one
// of `tp` tensor-parallel ranks, with sequence parallelism when `sp`.
ActivationPrediction predict_activations(const StagePlan& plan, const config::ModelConfig& model, int B, int T,
                                         int alive, int tp = 1, bool sp = false,
                                         DType activations = DType::F32);

}  // namespace tessera::exec
