#pragma once
// What `optim.*` chooses: the optimizer and its hyperparameters. Each optimizer reads the fields
// its comment names (the run config refuses the others when they are set); the learning rate and
// its schedule are the trainer's and arrive with each step.
#include <cstdint>
#include <string>

#include "config/optimizer_kind.h"

namespace tessera::optim {

// The kinds and their names live with the config (config/optimizer_kind.h), so that what reads
// configs need not link the optimizers; the optimizers' code names them from here.
using config::OptimizerKind;
using config::optimizer_name;
using config::optimizer_names;
using config::parse_optimizer_kind;

// Whether the optimizer updates each element from that element's own state alone. The others keep
// per-tensor statistics (Adafactor's factored moments, LAMB's and LARS' trust ratios, 8-bit Adam's
// block scales), summed over the ranks that hold a tensor's parts.
inline bool updates_elementwise(OptimizerKind kind) {
  return kind == OptimizerKind::AdamW || kind == OptimizerKind::Sgd || kind == OptimizerKind::OneBitAdam;
}

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;  // optim.name
  float weight_decay = 0.1f;   // every optimizer, on matrices and embeddings only
  float beta1 = 0.9f;          // adamw, adam8bit, lamb, onebit_adam; adafactor with first_moment
  float beta2 = 0.95f;         // adamw, adam8bit, lamb, onebit_adam
  float eps = 1e-8f;           // adamw, adam8bit, lamb, lars, onebit_adam
  float momentum = 0.0f;       // sgd, lars
  bool nesterov = false;       // sgd
  bool decoupled_weight_decay = false;  // sgd: p -= lr·wd·p instead of adding wd·p to the gradient
  float trust_coefficient = 0.001f;     // lars: η in η‖w‖ / (‖g‖ + wd‖w‖)
  // lamb, lars: the rate of the tensors the trust ratio leaves out (norm gains, biases) is lr × this.
  // Their rate is otherwise the raw lr, set for the matrices' relative steps: LAMB's 0.02 at 8× the
  // batch is ten times AdamW's rate on them.
  float unadapted_lr_scale = 1.0f;
  bool first_moment = false;   // adafactor: keep a momentum of the clipped update (beta1)
  bool relative_step = false;  // adafactor: the step is lr × max(1e-3, RMS(w)) per tensor
  float decay_rate = 0.8f;     // adafactor: β2 at step t is 1 − t^−decay_rate
  float clip_threshold = 1.0f; // adafactor: the update's RMS is clipped to this (d)
  int64_t block_size = 2048;   // adam8bit: elements per quantization block
  std::string quantization = "dynamic";  // adam8bit: "dynamic" (tree) or "linear" codes
  // onebit_adam: steps of exact Adam (dense gradient reduction) before the second moment freezes
  // and the momentum is exchanged in one bit per element (Tang et al. 2021 warm up for 15-25% of
  // training).
  int64_t freeze_step = 100;
  // adamw: after this many steps the second moment stops updating and keeps that step's bias
  // correction (0: never). Adam's update is then linear in the gradient, so a compressor's error
  // feedback (parallel.compression) sums to the exact gradients over the steps, as it does for
  // SGD; with a live v, a coordinate sent once in K steps arrives as one K-times-larger spike that
  // v normalizes away. Set it to the compressor's warm-up (compression.warmup_steps).
  int64_t variance_freeze_step = 0;
};

}  // namespace tessera::optim
