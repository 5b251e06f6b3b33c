#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/check.h"
#include "memory/copy_engine.h"
#include "core/tier.h"

using namespace tessera;
using namespace tessera::memory;

TEST(Tier, Names) {
  EXPECT_EQ(tier_name(Tier::Compute), "compute");
  EXPECT_EQ(tier_name(Tier::Host), "host");
  EXPECT_EQ(tier_name(Tier::Nvme), "nvme");
}

// One thread runs the queue in submission order; the handles complete in that order too.
TEST(CopyEngine, OneThreadRunsJobsInSubmissionOrder) {
  CopyEngine engine(1);
  std::vector<int> order;  // touched by the engine's one thread only
  std::vector<std::shared_ptr<CopyWork>> work;
  for (int i = 0; i < 200; ++i) work.push_back(engine.submit([&order, i] { order.push_back(i); }));
  for (auto& w : work) w->wait();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
}

// Several threads take jobs from one FIFO queue. Two gate jobs hold both threads while 50 jobs
// queue up; opening one gate leaves one thread to run the queue, which must then be in order.
TEST(CopyEngine, SeveralThreadsTakeJobsInSubmissionOrder) {
  CopyEngine engine(2);
  std::atomic<int> gates_holding{0};
  std::atomic<bool> open_first{false}, open_second{false};
  auto first_gate = engine.submit([&] {
    ++gates_holding;
    while (!open_first.load()) std::this_thread::yield();
  });
  auto second_gate = engine.submit([&] {
    ++gates_holding;
    while (!open_second.load()) std::this_thread::yield();
  });
  while (gates_holding.load() < 2) std::this_thread::yield();
  std::vector<int> order;  // one thread at a time runs these: the other is held by its gate
  std::vector<std::shared_ptr<CopyWork>> work;
  for (int i = 0; i < 50; ++i) work.push_back(engine.submit([&order, i] { order.push_back(i); }));
  open_first = true;
  for (auto& w : work) w->wait();
  open_second = true;
  first_gate->wait();
  second_gate->wait();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(CopyEngine, WaitRethrowsTheJobsErrorEveryTime) {
  CopyEngine engine(2);
  auto failing = engine.submit([] { TS_FAIL("disk '{}' went away", "/scratch"); });
  auto fine = engine.submit([] {});
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      failing->wait();
      FAIL() << "wait() did not rethrow";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "disk '/scratch' went away");
    }
  }
  EXPECT_TRUE(failing->is_completed());
  EXPECT_NO_THROW(fine->wait());
}

TEST(CopyEngine, IsCompletedDoesNotBlockAndSecondsCountsTheRun) {
  CopyEngine engine(1);
  std::atomic<bool> release{false};
  auto work = engine.submit([&] {
    while (!release.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_FALSE(work->is_completed());
  release = true;
  work->wait();
  EXPECT_TRUE(work->is_completed());
  EXPECT_GE(work->seconds(), 0.019);
  EXPECT_LT(work->seconds(), 5.0);
}

TEST(CopyEngine, PartsShareOneHandleAndItsFirstError) {
  CopyEngine engine(2);
  std::atomic<int> ran{0};
  std::vector<std::function<void()>> parts;
  for (int i = 0; i < 10; ++i) {
    parts.emplace_back([&ran, i] {
      ++ran;
      if (i == 3) TS_FAIL("part {} failed", i);
    });
  }
  auto work = engine.submit_parts(std::move(parts));
  EXPECT_THROW(work->wait(), Error);
  EXPECT_EQ(ran.load(), 10);  // the other parts ran: the handle completes when all have
  auto none = engine.submit_parts({});
  EXPECT_TRUE(none->is_completed());
  EXPECT_NO_THROW(none->wait());
}

// A failed part does not complete the handle while another part still runs.
TEST(CopyEngine, AFailedPartLeavesTheHandleOpenUntilEveryPartHasRun) {
  CopyEngine engine(2);
  std::atomic<bool> failed{false}, open_gate{false};
  std::vector<std::function<void()>> parts;
  parts.emplace_back([&] {
    failed = true;
    TS_FAIL("first part failed");
  });
  parts.emplace_back([&] {
    while (!open_gate.load()) std::this_thread::yield();
  });
  auto work = engine.submit_parts(std::move(parts));
  while (!failed.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time for the failure to be recorded
  EXPECT_FALSE(work->is_completed());
  open_gate = true;
  EXPECT_THROW(work->wait(), Error);
  EXPECT_TRUE(work->is_completed());
}

TEST(CopyEngine, DestructorFinishesQueuedJobs) {
  std::atomic<int> ran{0};
  std::vector<std::shared_ptr<CopyWork>> work;
  {
    CopyEngine engine(2);
    for (int i = 0; i < 100; ++i) {
      work.push_back(engine.submit([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ++ran;
      }));
    }
  }
  EXPECT_EQ(ran.load(), 100);
  for (auto& w : work) EXPECT_TRUE(w->is_completed());
}

TEST(CopyEngine, RefusesNoThreads) { EXPECT_THROW(CopyEngine(0), Error); }
