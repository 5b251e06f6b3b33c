#pragma once
// A rank that stops or dies before MPI has started leaves every other rank waiting inside MPI's
// initialization, where no communicator and so no watchdog exists yet: the job would hang forever.
// StartupGuard covers that window: if started() is not called within the timeout, it prints one
// line naming the timeout and ends this process (mpirun then ends the others). Under `tessera
// launch` (dist/job_status.h) it marks this rank as starting, names the ranks that never did, and
// ends this process as soon as another rank has failed before start-up, without waiting out the
// timeout. Like the watchdog, it is one of the few places tessera ends a process on its own.
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "dist/job_status.h"

namespace tessera::dist {

class StartupGuard {
 public:
  // `rank` and `size` as the launcher announced them (MPI cannot say yet), or -1 when unknown.
  StartupGuard(double timeout_seconds, int rank, int size, std::optional<JobStatus> status = std::nullopt);
  ~StartupGuard();
  StartupGuard(const StartupGuard&) = delete;
  StartupGuard& operator=(const StartupGuard&) = delete;

  void started();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool started_ = false;
  std::thread thread_;

  void watch(double timeout_seconds, int rank, int size, const std::optional<JobStatus>& status);
};

// The rank and size a launcher (OpenMPI's mpirun, PMIx, Slurm) gives a process in its environment,
// before MPI is initialized; -1 when none did.
int launcher_rank();
int launcher_size();

}  // namespace tessera::dist
