#pragma once
// Pure generator functions: parallel layout -> per-rank instruction lists, transfers included.
// A generator reads p = layout.pp, v = layout.virtual_stages and m = layout.microbatches() (the
// global batch over dp x micro batch); the other factors (dp, tp, ep) do not change a pipeline's
// order. Each refuses layouts it cannot serve with a tessera::Error that says why and what to use.
#include <cstdint>
#include <string_view>

#include "config/parallel_layout.h"
#include "schedule/instruction.h"

namespace tessera::pipeline {

// Which weight version a PipeDream-2BW microbatch reads on a stage (its forward and backward there
// read the same one). Either way a stage holds at most two versions.
enum class TwoBWVersions : std::uint8_t {
  // The newest the stage holds when the microbatch's forward reaches it. Only the microbatches a
  // stage starts before its step for the previous batch read the older version: the first
  // p - 1 - s of each batch on stage s (none on the last stage, none at all at pp = 1). Every other
  // gradient is as fresh as in a flushing schedule.
  Newest,
  // Every microbatch of batch b reads version b - 1 on every stage: the paper's uniform delay,
  // W(t + 1) = W(t) - lr * grad(W(t - 1)).
  Delayed,
};

// "newest" or "delayed" (parallel.weight_version); anything else throws, naming both.
TwoBWVersions parse_two_bw_versions(std::string_view name);

// What a schedule needs beyond the layout.
struct GeneratorOptions {
  int steps = 1;           // optimizer steps in one list (PipeDream-2BW only; flushing kinds use 1)
  int first_step = 0;      // optimizer steps before the list (PipeDream-2BW only; Schedule::first_step)
  bool recompute = false;  // activation checkpointing: Recompute right before each backward
  TwoBWVersions two_bw_versions = TwoBWVersions::Newest;  // PipeDream-2BW only
};

// Throws with a clear message when `kind` cannot serve the layout's (p, m, v) with `options`
// (p = 0, m = 0, a global batch dp x b does not divide, chunks on a non-interleaved kind,
// interleaved with m not a multiple of p, 2BW with m < p, ...).
void check_layout_for(ScheduleKind kind, const config::ParallelLayout& layout, const GeneratorOptions& options = {});

// The per-kind generators serve their own kind whatever layout.schedule says, so one layout can be
// played by several kinds side by side; make_schedule follows layout.schedule.
//
// All forwards, then all backwards (Huang et al. 2019). Peak m microbatches alive per stage.
Schedule make_gpipe(const config::ParallelLayout& layout, const GeneratorOptions& options = {});
// PipeDream-Flush / Megatron 1F1B: rank r runs p - r - 1 warm-up forwards, then alternates one
// forward with one backward. Same bubble as GPipe, at most p - r microbatches alive on rank r.
Schedule make_one_f_one_b(const config::ParallelLayout& layout, const GeneratorOptions& options = {});
// Megatron PTD-P interleaved 1F1B: v chunks per rank, stage s on rank s % p. Bubble divided by v
// at v times the point-to-point traffic; m must be a multiple of p when v > 1.
Schedule make_interleaved(const config::ParallelLayout& layout, const GeneratorOptions& options = {});
// PipeDream-2BW: 1F1B without flushes over `steps` batches of m microbatches. Batch b (counted
// from the start of training: the list's first is options.first_step) reads weight version b, or
// max(0, b - 1) where options.two_bw_versions says (TwoBWVersions); the optimizer step after
// batch b makes version b + 1, so at most two versions are alive (double buffering) when m >= p.
Schedule make_pipedream_2bw(const config::ParallelLayout& layout, const GeneratorOptions& options = {});
// Zero bubble ZB-H1 (Qi et al. 2023): backward split into B (input gradient) and W (weight
// gradient); rank r runs, for x = 0, 1, ...: F(x), B(x - (p - 1 - r)), W(x - (p - 1)). W fills the
// bubbles; at most p microbatches alive per rank, as for 1F1B's first rank.
Schedule make_zero_bubble_h1(const config::ParallelLayout& layout, const GeneratorOptions& options = {});

// The schedule of layout.schedule.
Schedule make_schedule(const config::ParallelLayout& layout, const GeneratorOptions& options = {});

}  // namespace tessera::pipeline
