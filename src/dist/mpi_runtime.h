#pragma once
// MpiRuntime: MPI's lifetime, owned by main() (or by the command that needs MPI) and passed by
// reference; the only process-wide state tessera's distributed code has is what MPI itself holds.
// Rank and size always come from the MPI runtime, so `mpirun -n N tessera ...`,
// `tessera launch -n N -- ...` and `srun --mpi=pmix tessera ...` all work the same way; started
// without any launcher the process is a world of one.
//
// Destroy every communicator before the runtime (declare the runtime first).
//
// Ending a job on an error: a rank that stops on an exception while its peers are inside a
// collective with it would leave them waiting until the watchdog fires (and MPI_Finalize itself
// waits for every rank). So a multi-rank program that catches a fatal error should print it and
// call abort_job(); and if the runtime is destroyed while an exception is unwinding the stack in
// a job of several ranks, its destructor calls MPI_Abort instead of MPI_Finalize. Together with
// the watchdog these are the only places where tessera ends a process.
#include <memory>

#include "dist/communicator.h"

namespace tessera::dist {

class MpiRuntime {
 public:
  // MPI_Init_thread with MPI_THREAD_MULTIPLE (every communicator's progress thread calls MPI).
  // One per process; argc/argv may be null.
  MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

  // Collective over all ranks: a communicator over the whole world (a duplicate of
  // MPI_COMM_WORLD), with a new watchdog that the sub-communicators split from it share.
  std::unique_ptr<Communicator> world(const CommOptions& options = {}) const;

  // Ends every rank of the job now (MPI_Abort on the world) with `code` as the exit status.
  [[noreturn]] void abort_job(int code) const;

  // Exit status of a job the watchdog ends, as mpirun reports it.
  static constexpr int kWatchdogExitCode = 124;

  struct Reductions;  // MPI operations for 16-bit floats (mpi_runtime.cpp)
  const Reductions& reductions() const { return *reductions_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  int uncaught_at_start_ = 0;
  std::unique_ptr<Reductions> reductions_;
};

}  // namespace tessera::dist
