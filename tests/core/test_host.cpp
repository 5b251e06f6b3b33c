#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "core/check.h"
#include "core/host.h"

using namespace tessera;

TEST(Host, ProcStatBusyTimeCountsUserNiceSystemIrqSoftirqAndSteal) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  EXPECT_DOUBLE_EQ(host::busy_seconds_of_proc_stat_line("cpu  100 5 20 1000 30 2 3 4 7 0", 100.0), 1.34);
  EXPECT_DOUBLE_EQ(host::busy_seconds_of_proc_stat_line("cpu 0 0 0 500 0 0 0 0", 100.0), 0.0);
}

TEST(Host, ProcStatLinesOtherThanTheMachinesAreRefused) {
  EXPECT_THROW(host::busy_seconds_of_proc_stat_line("cpu0 1 2 3 4 5 6 7 8", 100.0), Error);
  EXPECT_THROW(host::busy_seconds_of_proc_stat_line("cpu 1 2 3", 100.0), Error);
  EXPECT_THROW(host::busy_seconds_of_proc_stat_line("intr 1 2 3 4 5 6 7 8", 100.0), Error);
  EXPECT_THROW(host::busy_seconds_of_proc_stat_line("", 100.0), Error);
}

TEST(Host, OthersShareIsTheMachinesBusyTimeLessOursOverTheCores) {
  const host::CpuTimes from{10.0, 4.0, 100.0};
  EXPECT_DOUBLE_EQ(host::others_share(from, {13.0, 5.0, 102.0}, 2), 0.5);  // 2 s of 4 core-seconds
  EXPECT_DOUBLE_EQ(host::others_share(from, {14.0, 8.0, 102.0}, 2), 0.0);  // all of it ours
  EXPECT_DOUBLE_EQ(host::others_share(from, {13.0, 5.0, 102.0}, 1), 1.0);  // more than the cores: clamped
  EXPECT_DOUBLE_EQ(host::others_share(from, {13.0, 5.0, 100.0}, 2), 0.0);  // no time passed
}

TEST(Host, OurOwnWorkIsCountedAsOursAndAsTheMachines) {
  const host::CpuTimes from = host::cpu_times_now();
  volatile double sink = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300)) sink = sink + std::sqrt(sink + 1.0);
  const host::CpuTimes to = host::cpu_times_now();
  const double own = to.own - from.own, machine = to.machine_busy - from.machine_busy;
  // On a loaded machine this process may get less than the whole 0.3 s; it gets some of it.
  EXPECT_GT(own, 0.05);
  EXPECT_LE(own, to.wall - from.wall + 0.05);
  // The machine's count holds ours (to its tick of 10 ms, on each side).
  EXPECT_GE(machine, own - 0.05);
}

TEST(Host, TheCpuHasAName) { EXPECT_FALSE(host::cpu_model().empty()); }
