#pragma once
// fp16's loss scaling (memory/loss_scaler.h) as a transform in the chain's loss-scaling slot
// (exec/transform.h). A training program runs with the scale the scaler has when the program
// begins — one scale for the whole program: under PipeDream-2BW its batches' steps update the
// scaler while later batches' backwards, already scaled, are still to come — and every unit
// action's gradient scale is taken times it, so the backward starts from the loss times the scale
// and every gradient is that many times larger. Losses a module adds of its own (an MoE router's)
// join the gradient at the same scale.
//
// The other half — taking the scale back out of the gradients, or skipping the step when they
// overflowed — is the optimizer step's, one seam (docs/execution.md): whether the parameters are
// updated is a decision about the step, which comes after the chain's finish and which no
// transform can call off, and the overflow is read off the global gradient norm the step measures
// for clipping anyway, so one collective serves both. The step calls unscale() on a finite norm.
#include <span>
#include <string_view>

#include "exec/transform.h"
#include "memory/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/grad_norm.h"
#include "parallel/offloaded_gradients.h"

namespace tessera::parallel {

class LossScaling final : public exec::Transform {
 public:
  // Keeps `scaler` (enabled) by reference.
  explicit LossScaling(memory::LossScaler& scaler);

  std::string_view name() const override { return "loss scaling"; }
  void begin(const exec::Program& program) override;
  void before(const exec::Event& event) override;

  // The scale the running (or the last) training program's gradients carry.
  double program_scale() const { return program_scale_; }
  // The step found the gradients finite, with global norm `norm` measured on the scaled ones:
  // brings `segments`' gradients (and those `elsewhere` holds, as they are read) and the norm back
  // to the true values, in f32, and lets the scaler count a finite step. With the default factors
  // the scale is a power of two, so the divisions are exact.
  void unscale(std::span<const optim::Segment> segments, OffloadedGradients* elsewhere, GradNorm& norm);

 private:
  memory::LossScaler& scaler_;
  double program_scale_ = 1;
};

}  // namespace tessera::parallel
