#pragma once
// Work: the handle every communicator call returns. The operation runs on the communicator's
// progress thread while the caller computes; wait() blocks until it is done and rethrows the
// error it failed with, if any. Buffers passed to the call must stay alive and untouched until
// the work completes.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "dist/ops.h"

namespace tessera::dist {

class Work {
 public:
  // `peer` is the other rank of a send or recv, -1 otherwise.
  Work(OpKind kind, uint64_t seq, uint64_t bytes_sent, int peer = -1);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();                 // blocks until done; throws tessera::Error if the operation failed
  // Blocks until the backend has handed the operation to its transport (or it has finished or
  // failed). From there a receiver can take a message without this process: MPI's shared-memory
  // transport lets the receiving rank copy a large message out of the sender's memory itself.
  // A sender about to compute calls it so that its peer is not left waiting for the progress
  // thread to be scheduled while both cores are busy. (The MPI backend posts sends and receives
  // on the caller's thread, so there it returns at once.)
  void wait_started();
  bool is_completed() const;   // done, successfully or not; never blocks

  OpKind kind() const { return kind_; }
  std::string_view op() const { return op_name(kind_); }
  uint64_t seq() const { return seq_; }             // position in its series (see ops.h)
  uint64_t bytes_sent() const { return bytes_; }    // by the convention of ops.h
  int peer() const { return peer_; }
  // Seconds from posting to completion, as seen by the progress thread; 0 until completed.
  // Comparing it with the caller's own clock shows whether the operation progressed while the
  // caller was busy (overlap) or only once it waited.
  double seconds() const;
  std::string describe() const;                     // "all_reduce #17", "send #3 to rank 2"

  // Called by the backend: mark_started when the transport has the operation, then one of the
  // other two, once.
  void mark_started();
  void mark_completed();
  void mark_failed(std::exception_ptr error);

 private:
  const OpKind kind_;
  const uint64_t seq_;
  const uint64_t bytes_;
  const int peer_;
  const std::chrono::steady_clock::time_point posted_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool started_ = false;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point finished_;
};

using WorkPtr = std::shared_ptr<Work>;

// Waits for every handle in order; the first failure is rethrown after all have finished, so no
// buffer is still in use when the exception propagates.
void wait_all(std::span<const WorkPtr> works);

}  // namespace tessera::dist
