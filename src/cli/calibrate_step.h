#pragma once
// `tessera plan --calibrate-here`'s whole-step measurement: kernels measured alone run faster than
// inside a training step, where their operands come from memory other work has just used and the
// step allocates, dispatches and keeps books around them. Measuring the engine's own step on a
// reference model gives the fraction of the kernel-by-kernel prediction a step achieves.
#include "config/model_config.h"

namespace tessera::cli {

// A small GPT-2 (2 layers of 192 channels, 3 heads, 128 positions, 1536 tokens), shaped like no
// shipped config: a reference, not one of the runs the planner is checked on.
config::ModelConfig reference_model();

// The seconds of the engine's training step (forward, backward, gradient-norm clipping, AdamW; one
// process, fp32) on `model` for one microbatch of `batch` sequences, with `threads` OpenMP
// threads: the median of 10 steps after 2 of warm-up.
double training_step_seconds(const config::ModelConfig& model, int batch, int threads);

}  // namespace tessera::cli
