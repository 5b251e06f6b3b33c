#include "parallel/loss_scaling.h"

#include "core/check.h"
#include "kernels/cpu/residual.h"

namespace tessera::parallel {

LossScaling::LossScaling(memory::LossScaler& scaler) : scaler_(scaler) {
  TS_CHECK(scaler.enabled(), "the loss-scaling transform with a loss scaler that is disabled");
}

void LossScaling::begin(const exec::Program& program) {
  if (program.training) program_scale_ = scaler_.scale();
}

void LossScaling::before(const exec::Event& event) {
  // An evaluation's loss carries no gradient.
  if (event.step == nullptr || !event.program->training) return;
  event.step->grad_scale *= static_cast<float>(program_scale_);
}

void LossScaling::unscale(std::span<const optim::Segment> segments, OffloadedGradients* elsewhere, GradNorm& norm) {
  const double inverse = 1.0 / program_scale_;
  for (const optim::Segment& s : segments) {
    if (s.grad != nullptr) kernels::scale_inplace(s.grad, static_cast<float>(inverse), static_cast<size_t>(s.size()));
  }
  if (elsewhere != nullptr) elsewhere->scale_when_read(static_cast<float>(inverse));
  norm.norm *= inverse;
  scaler_.update(true);
}

}  // namespace tessera::parallel
