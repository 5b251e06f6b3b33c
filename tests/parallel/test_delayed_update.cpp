// The delayed update's mechanics with an optimizer whose step is known: the master values do not
// move until apply(), the update reads the gradients as they were at start() (the next step's
// backward may overwrite them), it runs on another thread while the caller goes on, and an error
// in it reaches the caller. With extrapolation, apply() can write the guess w_t + (w_t - w_{t-1})
// while the updates go on from w_t.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/delayed_update.h"

using namespace tessera;
using tessera::parallel::DelayedUpdate;

namespace {

// value -= lr * grad, after waiting until released (so that a test can hold the update running).
class SlowDescent final : public optim::Optimizer {
 public:
  std::string_view name() const override { return "slow descent"; }
  void step(float lr, std::span<const optim::Segment> segments) override {
    started = true;
    while (!released) std::this_thread::yield();
    worker = std::this_thread::get_id();
    if (fail) throw std::runtime_error("the update failed");
    for (const optim::Segment& s : segments) {
      for (int64_t i = 0; i < s.size(); ++i) s.value[i] -= lr * s.grad[i];
    }
    ++steps;
  }
  optim::StateDict state_dict() override { return {}; }
  void load_state_dict(optim::StateDict) override {}
  int64_t steps_taken() const override { return steps; }
  int64_t owned_elements() const override { return 0; }

  std::atomic<bool> started = false;
  std::atomic<bool> released = true;
  bool fail = false;
  int64_t steps = 0;
  std::thread::id worker;
};

struct Master {
  std::vector<float> values{1, 2, 3, 4, 5};
  std::vector<float> grads{10, 20, 30, 40, 50};
  // Two segments, as two parameters: [0, 2) and [2, 5).
  std::vector<optim::Segment> segments() {
    return {{nullptr, 0, 2, values.data(), grads.data()}, {nullptr, 0, 3, values.data() + 2, grads.data() + 2}};
  }
};

TEST(DelayedUpdate, TheValuesMoveAtApplyByTheGradientsOfStart) {
  MemoryAccountant memory;
  DelayedUpdate update(5, /*extrapolate=*/false, memory);
  EXPECT_EQ(memory.stats().live_of(MemoryTag::Optimizer), 2 * 5 * sizeof(float));
  Master m;
  SlowDescent optimizer;
  optimizer.released = false;
  update.start(optimizer, 0.5f, m.segments());
  EXPECT_TRUE(update.pending());
  while (!optimizer.started) std::this_thread::yield();
  // The next step's backward writes new gradients and reads the old values meanwhile.
  for (float& g : m.grads) g = 1000;
  EXPECT_EQ(m.values, (std::vector<float>{1, 2, 3, 4, 5}));
  optimizer.released = true;
  EXPECT_TRUE(update.apply(m.segments()));
  EXPECT_FALSE(update.pending());
  EXPECT_EQ(m.values, (std::vector<float>{-4, -8, -12, -16, -20}));
  EXPECT_NE(optimizer.worker, std::this_thread::get_id());
  EXPECT_FALSE(update.apply(m.segments()));  // nothing pending: nothing changes
  EXPECT_EQ(m.values, (std::vector<float>{-4, -8, -12, -16, -20}));

  // The next update starts from the values the last one made, with the gradients of its own start.
  update.start(optimizer, 0.001f, m.segments());
  EXPECT_TRUE(update.apply(m.segments()));
  EXPECT_EQ(m.values, (std::vector<float>{-5, -9, -13, -17, -21}));
  EXPECT_EQ(optimizer.steps, 2);
}

TEST(DelayedUpdate, ValuesWrittenFromOutsideAreTakenAfterForgetValues) {
  MemoryAccountant memory;
  DelayedUpdate update(5, /*extrapolate=*/false, memory);
  Master m;
  SlowDescent optimizer;
  update.start(optimizer, 0.1f, m.segments());
  update.apply(m.segments());
  update.forget_values();
  m.values = {0, 0, 0, 0, 0};  // a checkpoint load
  m.grads = {1, 1, 1, 1, 1};
  update.start(optimizer, 1.0f, m.segments());
  update.apply(m.segments());
  EXPECT_EQ(m.values, (std::vector<float>{-1, -1, -1, -1, -1}));
}

TEST(DelayedUpdate, AnErrorInTheUpdateReachesTheCallerAndLeavesTheValues) {
  MemoryAccountant memory;
  DelayedUpdate update(5, /*extrapolate=*/false, memory);
  Master m;
  SlowDescent optimizer;
  optimizer.fail = true;
  update.start(optimizer, 1.0f, m.segments());
  EXPECT_THROW(update.apply(m.segments()), std::runtime_error);
  EXPECT_EQ(m.values, (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_FALSE(update.pending());
  // One start at a time.
  optimizer.fail = false;
  optimizer.released = false;
  update.start(optimizer, 1.0f, m.segments());
  EXPECT_THROW(update.start(optimizer, 1.0f, m.segments()), Error);
  optimizer.released = true;
}

TEST(DelayedUpdate, ExtrapolatedWeightsAddTheLastChangeOnceMoreAndTheUpdatesGoOnFromTheTrueOnes) {
  MemoryAccountant memory;
  DelayedUpdate update(5, /*extrapolate=*/true, memory);
  EXPECT_EQ(memory.stats().live_of(MemoryTag::Optimizer), 3 * 5 * sizeof(float));
  Master m;
  SlowDescent optimizer;
  const auto extrapolated = DelayedUpdate::Weights::Extrapolated;
  // w = (1, 2, 3, 4, 5) - 0.5 (10, 20, ...) = (-4, -8, ...): a change of (-5, -10, ...), added again.
  update.start(optimizer, 0.5f, m.segments());
  EXPECT_TRUE(update.apply(m.segments(), extrapolated));
  EXPECT_EQ(m.values, (std::vector<float>{-9, -18, -27, -36, -45}));
  // The next update steps from the true (-4, -8, ...), not from the guess the step computed on.
  m.grads = {1, 1, 1, 1, 1};
  update.start(optimizer, 1.0f, m.segments());
  EXPECT_TRUE(update.apply(m.segments()));
  EXPECT_EQ(m.values, (std::vector<float>{-5, -9, -13, -17, -21}));
  // Applied plain (before a checkpoint), then the values forgotten: the next start copies the master
  // values, and its extrapolation adds the change from them.
  update.forget_values();
  update.start(optimizer, 2.0f, m.segments());
  EXPECT_TRUE(update.apply(m.segments(), extrapolated));
  EXPECT_EQ(m.values, (std::vector<float>{-9, -13, -17, -21, -25}));

  // A guess left standing (the step that computed on it was skipped and started nothing): applying
  // the updated values with nothing pending puts the true ones back, as a checkpoint needs.
  EXPECT_FALSE(update.apply(m.segments(), extrapolated));
  EXPECT_EQ(m.values, (std::vector<float>{-9, -13, -17, -21, -25}));
  EXPECT_TRUE(update.apply(m.segments()));
  EXPECT_EQ(m.values, (std::vector<float>{-7, -11, -15, -19, -23}));
  EXPECT_FALSE(update.apply(m.segments()));

  // Without extrapolation there is no earlier value to extrapolate from.
  DelayedUpdate plain(5, /*extrapolate=*/false, memory);
  plain.start(optimizer, 1.0f, m.segments());
  EXPECT_THROW(plain.apply(m.segments(), extrapolated), Error);
  EXPECT_TRUE(plain.apply(m.segments()));
}

TEST(DelayedUpdate, EndingWithAnUpdateRunningWaitsForIt) {
  MemoryAccountant memory;
  Master m;
  SlowDescent optimizer;
  optimizer.released = false;
  std::thread release;
  {
    DelayedUpdate update(5, /*extrapolate=*/false, memory);
    update.start(optimizer, 1.0f, m.segments());
    release = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      optimizer.released = true;
    });
  }
  release.join();
  EXPECT_EQ(optimizer.steps, 1);
  EXPECT_EQ(memory.stats().live_of(MemoryTag::Optimizer), 0u);
}

}  // namespace
