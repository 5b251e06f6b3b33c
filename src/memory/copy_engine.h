#pragma once
// The copy engine: moves between memory tiers run here, on the engine's own threads, while the
// trainer's thread goes on computing, as copies on a GPU run on their own stream. A move is a job;
// submitting it returns a CopyWork handle that the reader of the moved data waits for (like a
// pipeline receive), and wait() rethrows the job's error there, where it can be reported with
// what was being moved.
//
// Jobs start in the order they were submitted (FIFO). With more than one thread, a later job may
// finish before an earlier one: a caller that needs an order waits for the earlier handle. A
// transfer split into parts (submit_parts) queues its parts together and has one handle, so a
// large transfer keeps every thread busy while a small one behind it still starts soon after.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::memory {

class CopyWork {
 public:
  // Blocks until every part of the job has run, then rethrows the first error one of them threw
  // (every call rethrows it).
  void wait();
  // Whether the job has finished, with or without an error. Never blocks.
  bool is_completed() const;
  // How long the job has run: from the start of its first part to the end of its last one (so
  // far, while it runs; 0 before it starts). Time spent queued is not counted.
  double seconds() const;

 private:
  friend class CopyEngine;
  explicit CopyWork(int parts);
  void part_started();
  void part_finished(std::exception_ptr error);

  using Clock = std::chrono::steady_clock;
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  int parts_left_;
  bool started_ = false;
  Clock::time_point start_time_;
  Clock::time_point end_time_;
  std::exception_ptr error_;
  std::atomic<bool> completed_{false};
};

class CopyEngine {
 public:
  explicit CopyEngine(int threads = 2);
  // Runs every job still queued, then joins the threads.
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  std::shared_ptr<CopyWork> submit(std::function<void()> job);
  // One job in parts that may run at the same time on different threads; the handle completes
  // when all of them have. No parts: a handle that is already complete.
  std::shared_ptr<CopyWork> submit_parts(std::vector<std::function<void()>> parts);

  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Part {
    std::function<void()> run;
    std::shared_ptr<CopyWork> work;
  };
  void run_parts();
  void stop_and_join();

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Part> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::memory
