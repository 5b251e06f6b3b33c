#include <gtest/gtest.h>

#include "optim/lr_schedule.h"

using tessera::optim::WarmupCosine;

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  WarmupCosine s{1e-3f, 1e-4f, 10, 111};  // decays over steps 10..110
  EXPECT_FLOAT_EQ(s.at(0), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(4), 5e-4f);
  EXPECT_FLOAT_EQ(s.at(9), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(10), 1e-3f);
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-6);  // halfway through the decay
  EXPECT_FLOAT_EQ(s.at(110), 1e-4f);
  for (int64_t i = 11; i < 111; ++i) EXPECT_LE(s.at(i), s.at(i - 1));
}

TEST(LrSchedule, NoWarmupAndSingleStep) {
  WarmupCosine s{2e-3f, 0.0f, 0, 1};
  EXPECT_FLOAT_EQ(s.at(0), 2e-3f);
  WarmupCosine t{2e-3f, 0.0f, 0, 3};
  EXPECT_FLOAT_EQ(t.at(0), 2e-3f);
  EXPECT_FLOAT_EQ(t.at(2), 0.0f);
}

// A schedule continued with another length: from the restart step the rate falls from the restart
// rate to the floor at the new last step, and before it the schedule is unchanged.
TEST(LrSchedule, ARestartContinuesTheDecayFromItsRate) {
  WarmupCosine s{1e-3f, 1e-4f, 10, 201};
  const WarmupCosine before{1e-3f, 1e-4f, 10, 101};
  s.restart_step = 60;
  s.restart_rate = before.at(60);
  const WarmupCosine unrestarted{1e-3f, 1e-4f, 10, 201};
  EXPECT_FLOAT_EQ(s.at(59), unrestarted.at(59));
  EXPECT_FLOAT_EQ(s.at(60), before.at(60));
  for (int64_t t = 61; t <= 200; ++t) EXPECT_LT(s.at(t), s.at(t - 1)) << t;
  EXPECT_FLOAT_EQ(s.at(200), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(500), 1e-4f);
}
