// How the ranks of a `tessera launch` job tell the launcher how they ended: the job's exit code
// from theirs, each different message once, and the start-up guard that names a missing rank and
// leaves at once when another rank failed before start-up.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "dist/job_status.h"
#include "dist/startup_guard.h"

namespace fs = std::filesystem;
using tessera::dist::JobStatus;
using tessera::dist::RankOutcome;

namespace {

fs::path fresh_folder(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_job_status_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(JobStatus, TheJobsCodeIsTheWorstOfItsRanks) {
  using tessera::dist::job_exit_code;
  EXPECT_EQ(job_exit_code({}), 0);
  EXPECT_EQ(job_exit_code({{0, 0, ""}, {1, 0, ""}}), 0);
  EXPECT_EQ(job_exit_code({{0, 3, ""}, {1, 3, ""}}), 3);
  EXPECT_EQ(job_exit_code({{0, 3, ""}, {1, 2, "bad"}}), 2);
  EXPECT_EQ(job_exit_code({{0, 2, "x"}, {1, 1, "y"}, {2, 3, ""}}), 1);
  EXPECT_EQ(job_exit_code({{0, 0, ""}, {1, 124, "late"}}), 124);
}

TEST(JobStatus, EachDifferentMessageOnceWithItsRanks) {
  using tessera::dist::messages_to_repeat;
  // Rank 0 printed its own; the same text from the others is not repeated.
  EXPECT_TRUE(messages_to_repeat({{0, 1, "error: a"}, {1, 1, "error: a"}, {2, 1, "error: a"}}).empty());
  const std::vector<std::string> lines =
      messages_to_repeat({{0, 1, "error: a"}, {1, 1, "error: b"}, {2, 1, "error: b"}, {3, 1, "error: a"},
                          {4, 1, "error: c"}, {5, 0, ""}, {6, 1, "error: b"}});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "ranks 1-2, 6: error: b");
  EXPECT_EQ(lines[1], "rank 4: error: c");
  EXPECT_EQ(tessera::dist::describe_ranks({0, 1, 2, 5, 7, 8}), "0-2, 5, 7-8");
}

TEST(JobStatus, OutcomesAndMarksGoThroughTheFolder) {
  const fs::path dir = fresh_folder("folder");
  JobStatus(dir.string(), 1).record_outcome(3, "");
  JobStatus(dir.string(), 0).record_outcome(1, "error: two\nlines");
  JobStatus(dir.string(), 2).mark(JobStatus::Mark::TakesStopRequests);
  const JobStatus reader(dir.string(), -1);
  const std::vector<RankOutcome> all = reader.outcomes();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rank, 0);
  EXPECT_EQ(all[0].exit_code, 1);
  EXPECT_EQ(all[0].message, "error: two\nlines");
  EXPECT_EQ(all[1].rank, 1);
  EXPECT_EQ(all[1].exit_code, 3);
  EXPECT_EQ(reader.ranks_without(JobStatus::Mark::TakesStopRequests, 4), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(reader.ranks_without(JobStatus::Mark::ReachedMpiStart, 2), (std::vector<int>{0, 1}));
  fs::remove_all(dir);
}

int in_child(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(99);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// The rank that never marked its start is named by its number, in the outcome the launcher reads.
TEST(StartupGuard, UnderTheLauncherItNamesTheRankThatNeverStarted) {
  const fs::path dir = fresh_folder("missing");
  JobStatus(dir.string(), 0).mark(JobStatus::Mark::ReachedMpiStart);
  const int status = in_child([&] {
    tessera::dist::StartupGuard guard(0.5, 2, 4, JobStatus(dir.string(), 2));
    std::this_thread::sleep_for(std::chrono::seconds(10));
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);  // the launcher says the code
  const std::vector<RankOutcome> all = JobStatus(dir.string(), -1).outcomes();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].rank, 2);
  EXPECT_NE(all[0].exit_code, 0);
  EXPECT_NE(all[0].message.find("ranks 1, 3 never reached MPI initialization"), std::string::npos) << all[0].message;
  fs::remove_all(dir);
}

// A rank whose config failed before start-up: the others leave at once instead of waiting out
// parallel.timeout_seconds, and leave the saying to it.
TEST(StartupGuard, AnotherRanksFailureBeforeStartUpEndsThisOneAtOnce) {
  const fs::path dir = fresh_folder("failed");
  JobStatus(dir.string(), 0).record_outcome(1, "error: config: unknown key");
  const auto t0 = std::chrono::steady_clock::now();
  const int status = in_child([&] {
    tessera::dist::StartupGuard guard(60.0, 1, 2, JobStatus(dir.string(), 1));
    std::this_thread::sleep_for(std::chrono::seconds(30));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(WIFEXITED(status));
  const std::vector<RankOutcome> all = JobStatus(dir.string(), -1).outcomes();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].exit_code, 1);
  EXPECT_EQ(all[1].message, "");
  fs::remove_all(dir);
}

}  // namespace
