#include <gtest/gtest.h>

#include "core/check.h"
#include "memory/loss_scaler.h"

using namespace tessera;

namespace {
config::LossScaling dynamic_scaling(double init, int64_t interval) {
  config::LossScaling o;
  o.enabled = true;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}
}  // namespace

// PyTorch's GradScaler on the same sequence of finite and non-finite steps: halve on each
// overflow (counter reset), double after `interval` finite steps in a row.
TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  memory::LossScaler s(dynamic_scaling(1024, 3));
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024);
  s.update(false);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.state().skipped_steps, 1);
  EXPECT_EQ(s.state().finite_steps, 0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.state().finite_steps, 0);
}

TEST(LossScaler, NeverGoesBelowOne) {
  memory::LossScaler s(dynamic_scaling(4, 100));
  for (int i = 0; i < 10; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_EQ(s.state().skipped_steps, 10);
}

TEST(LossScaler, AFixedScaleNeverChanges) {
  config::LossScaling o = dynamic_scaling(128, 1);
  o.dynamic = false;
  memory::LossScaler s(o);
  s.update(false);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.state().skipped_steps, 1);
}

TEST(LossScaler, OffItScalesByOneAndStillCountsSkippedSteps) {
  memory::LossScaler s(config::LossScaling{});
  EXPECT_FALSE(s.enabled());
  s.update(false);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_EQ(s.state().skipped_steps, 1);
}

TEST(LossScaler, RestoresACheckpointsStateAndRefusesANonsensicalOne) {
  memory::LossScaler s(dynamic_scaling(1024, 3));
  s.restore({256, 2, 5});
  EXPECT_EQ(s.scale(), 256);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);  // the restored count of finite steps continues
  EXPECT_THROW(s.restore({0.5, 0, 0}), Error);
  EXPECT_THROW(s.restore({1024, -1, 0}), Error);
}
