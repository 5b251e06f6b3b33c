// The parts of the runtime that need no MPI: work handles, the watchdog (with an abort action
// that records instead of ending the process) and the byte convention.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "dist/ops.h"
#include "dist/watchdog.h"
#include "dist/work.h"

using namespace tessera;
using namespace tessera::dist;
using namespace std::chrono_literals;

TEST(Work, WaitBlocksUntilCompletedAndRethrowsFailures) {
  auto w = std::make_shared<Work>(OpKind::AllReduce, 17, 4096);
  EXPECT_FALSE(w->is_completed());
  EXPECT_EQ(w->op(), "all_reduce");
  EXPECT_EQ(w->describe(), "all_reduce #17");
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    w->mark_completed();
  });
  w->wait();
  t.join();
  EXPECT_TRUE(w->is_completed());
  EXPECT_GT(w->seconds(), 0.0);

  auto bad = std::make_shared<Work>(OpKind::Recv, 3, 0, 2);
  EXPECT_EQ(bad->describe(), "recv #3 from rank 2");
  bad->mark_failed(std::make_exception_ptr(Error("peer disagrees")));
  EXPECT_THROW(bad->wait(), Error);
  // wait_all waits for every handle, then rethrows the first failure.
  auto good = std::make_shared<Work>(OpKind::Barrier, 4, 0);
  std::vector<WorkPtr> both{bad, good};
  std::thread late([&] { good->mark_completed(); });
  EXPECT_THROW(wait_all(both), Error);
  late.join();
  EXPECT_TRUE(good->is_completed());
}

// A sender waits until its transfer is in MPI's hands, not until it completes; a failure before
// that (nothing was posted) also ends the wait.
TEST(Work, WaitStartedReturnsOnceTheTransportHasTheOperation) {
  auto w = std::make_shared<Work>(OpKind::Send, 5, 1024, 1);
  std::atomic<bool> started{false};
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    started = true;
    w->mark_started();
  });
  w->wait_started();
  EXPECT_TRUE(started.load());
  EXPECT_FALSE(w->is_completed());
  t.join();
  w->mark_completed();
  w->wait_started();  // still returns at once

  auto failed = std::make_shared<Work>(OpKind::Send, 6, 1024, 1);
  std::thread f([&] { failed->mark_failed(std::make_exception_ptr(Error("no such peer"))); });
  failed->wait_started();
  f.join();
  EXPECT_TRUE(failed->is_completed());
  EXPECT_THROW(failed->wait(), Error);
}

TEST(Watchdog, ReportsTheOldestLateOperationOnce) {
  std::mutex m;
  std::vector<std::string> aborts;
  auto group = std::make_shared<GroupInfo>(GroupInfo{"dp", {1, 3}});
  {
    Watchdog dog(0.1, 1, 4, [&](const std::string& msg) {
      std::lock_guard lock(m);
      aborts.push_back(msg);
    });
    const uint64_t quick = dog.begin(group, OpKind::Broadcast, 5);
    dog.end(quick);  // finished in time: never reported
    dog.begin(group, OpKind::AllReduce, 17);
    std::this_thread::sleep_for(20ms);
    dog.begin(group, OpKind::Recv, 2, 3);
    EXPECT_EQ(dog.in_flight(), 2u);
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(10ms);
      std::lock_guard lock(m);
      if (aborts.size() >= 2) break;
    }
  }
  ASSERT_EQ(aborts.size(), 2u);
  EXPECT_EQ(aborts[0],
            "tessera watchdog: rank 1 of 4: all_reduce #17 on dp (group ranks 1,3) did not complete within 0.1 s; "
            "aborting the job");
  EXPECT_NE(aborts[1].find("recv #2 from rank 3 on dp"), std::string::npos) << aborts[1];
}

TEST(Watchdog, QuietWhileOperationsFinishInTime) {
  std::atomic<int> aborts{0};
  auto group = std::make_shared<GroupInfo>(GroupInfo{"world", {0, 1}});
  Watchdog dog(0.05, 0, 2, [&](const std::string&) { ++aborts; });
  for (int i = 0; i < 20; ++i) {
    const uint64_t t = dog.begin(group, OpKind::AllReduce, static_cast<uint64_t>(i));
    std::this_thread::sleep_for(5ms);
    dog.end(t);
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(aborts.load(), 0);
  EXPECT_THROW(Watchdog(0.0, 0, 1, [](const std::string&) {}), Error);
}

TEST(ByteConvention, RingVolumes) {
  // all-reduce: 2 (N-1)/N of the buffer.
  EXPECT_EQ(all_reduce_bytes(1000, 4, 4), 6000u);
  EXPECT_EQ(all_reduce_bytes(1000, 4, 1), 0u);
  EXPECT_EQ(all_reduce_bytes(3, 2, 2), 6u);
  // reduce-scatter: everything but this rank's chunk; all-gather: everything but the chunk the
  // successor delivers last. Equal chunks give (N-1)/N on every rank.
  const std::vector<size_t> equal{5, 5, 5, 5};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(reduce_scatter_bytes(equal, 4, r), 60u);
    EXPECT_EQ(all_gather_bytes(equal, 4, r), 60u);
  }
  const std::vector<size_t> uneven{2, 3, 4, 5};
  EXPECT_EQ(reduce_scatter_bytes(uneven, 1, 0), 12u);
  EXPECT_EQ(reduce_scatter_bytes(uneven, 1, 3), 9u);
  EXPECT_EQ(all_gather_bytes(uneven, 1, 0), 11u);  // all but rank 1's 3
  EXPECT_EQ(all_gather_bytes(uneven, 1, 3), 12u);  // all but rank 0's 2
  // Over the group the uneven volumes add up to (N-1) x the total, as the ring moves them.
  uint64_t rs = 0, ag = 0;
  for (int r = 0; r < 4; ++r) {
    rs += reduce_scatter_bytes(uneven, 1, r);
    ag += all_gather_bytes(uneven, 1, r);
  }
  EXPECT_EQ(rs, 3u * 14u);
  EXPECT_EQ(ag, 3u * 14u);
  // broadcast along the chain root, root+1, ...: all but the last rank forward the buffer.
  EXPECT_EQ(broadcast_bytes(10, 4, 2, 4, 2), 40u);
  EXPECT_EQ(broadcast_bytes(10, 4, 1, 4, 2), 0u);
  EXPECT_EQ(broadcast_bytes(10, 4, 0, 1, 0), 0u);
  EXPECT_EQ(all_to_all_bytes(uneven, 2, 1), 22u);
}
