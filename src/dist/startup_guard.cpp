#include "dist/startup_guard.h"

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

StartupGuard::StartupGuard(double timeout_seconds, int rank, int size) {
  thread_ = std::thread([this, timeout_seconds, rank, size] {
    std::unique_lock lock(mutex_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return started_; })) return;
    std::fprintf(stderr,
                 "error: rank %d of %d: the job did not start within parallel.timeout_seconds = %.1f s: some rank "
                 "never reached MPI initialization (stopped, crashed or not started); ending the job\n",
                 rank, size, timeout_seconds);
    std::fflush(stderr);
    std::_Exit(MpiRuntime::kWatchdogExitCode);
  });
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
