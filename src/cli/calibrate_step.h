#pragma once
// `tessera plan --calibrate-here`'s whole-step measurement: kernels measured alone run faster than
// inside a training step, where their operands come from memory other work has just used and the
// step allocates, dispatches and keeps books around them. Measuring the engine's own step on a
// reference model gives the fraction of the kernel-by-kernel prediction a step achieves.
#include "config/model_config.h"
#include "dist/communicator.h"

namespace tessera::cli {

// A small GPT-2 (2 layers of 192 channels, 3 heads, 128 positions, 1536 tokens), shaped like no
// shipped config: a reference, not one of the runs the planner is checked on.
config::ModelConfig reference_model();

// The sequences per rank of the reference step.
inline constexpr int kReferenceBatch = 4;

// The seconds of the engine's training step (forward, backward, gradient-norm clipping, AdamW;
// fp32) on `model` for one microbatch of `batch` sequences, with `threads` OpenMP threads: the
// median of 10 steps after 2 of warm-up. With `dp`, this rank's step of a data-parallel run over
// its members (collective); without, one process alone.
double training_step_seconds(const config::ModelConfig& model, int batch, int threads,
                             dist::Communicator* dp = nullptr);

}  // namespace tessera::cli
