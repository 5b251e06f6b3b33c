#include "dist/startup_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "dist/mpi_runtime.h"

namespace tessera::dist {

namespace {
int first_env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name); v != nullptr && *v != 0) return std::atoi(v);
  }
  return -1;
}
}  // namespace

int launcher_rank() { return first_env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}); }
int launcher_size() { return first_env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}); }

StartupGuard::StartupGuard(double timeout_seconds, int rank, int size, std::optional<JobStatus> status) {
  if (status) status->mark(JobStatus::Mark::ReachedMpiStart);
  thread_ = std::thread([this, timeout_seconds, rank, size, status] { watch(timeout_seconds, rank, size, status); });
}

void StartupGuard::watch(double timeout_seconds, int rank, int size, const std::optional<JobStatus>& status) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const Clock::time_point deadline = Clock::now() + seconds(timeout_seconds);
  // Without a status folder there is nothing to look at before the deadline.
  const Clock::duration poll = seconds(status ? 0.2 : timeout_seconds);
  std::unique_lock lock(mutex_);
  for (;;) {
    const Clock::time_point until = std::min(deadline, Clock::now() + poll);
    if (cv_.wait_until(lock, until, [&] { return started_; })) return;
    if (status) {
      for (const RankOutcome& o : status->outcomes()) {
        if (o.rank == rank || o.exit_code == 0) continue;
        // That rank said why (the launcher repeats it); this one only leaves.
        status->record_outcome(o.exit_code, "");
        std::_Exit(0);
      }
    }
    if (Clock::now() >= deadline) break;
  }
  std::string who = "some rank never reached MPI initialization";
  if (status && size > 0) {
    const std::vector<int> missing = status->ranks_without(JobStatus::Mark::ReachedMpiStart, size);
    if (!missing.empty()) {
      who = fmt::format("{} {} never reached MPI initialization", missing.size() == 1 ? "rank" : "ranks",
                        describe_ranks(missing));
    }
  }
  const std::string message = fmt::format(
      "error: the job did not start within parallel.timeout_seconds = {:.1f} s: {} (stopped, crashed or not "
      "started); ending the job", timeout_seconds, who);
  if (status && rank != 0) {
    status->record_outcome(MpiRuntime::kWatchdogExitCode, message);
  } else {
    std::fprintf(stderr, "%s%s\n", rank >= 0 && size > 0 ? fmt::format("rank {} of {}: ", rank, size).c_str() : "",
                 message.c_str());
    std::fflush(stderr);
    if (status) status->record_outcome(MpiRuntime::kWatchdogExitCode, message);
  }
  std::_Exit(status ? 0 : MpiRuntime::kWatchdogExitCode);
}

void StartupGuard::started() {
  {
    std::lock_guard lock(mutex_);
    started_ = true;
  }
  cv_.notify_all();
}

StartupGuard::~StartupGuard() {
  started();
  thread_.join();
}

}  // namespace tessera::dist
