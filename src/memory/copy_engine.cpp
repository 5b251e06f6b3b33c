#include "memory/copy_engine.h"

#include <system_error>

#include "core/check.h"

namespace tessera::memory {

CopyWork::CopyWork(int parts) : parts_left_(parts) {
  if (parts == 0) completed_.store(true, std::memory_order_release);
}

void CopyWork::wait() {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return parts_left_ == 0; });
  if (error_) std::rethrow_exception(error_);
}

bool CopyWork::is_completed() const { return completed_.load(std::memory_order_acquire); }

double CopyWork::seconds() const {
  std::lock_guard lock(mutex_);
  if (!started_) return 0.0;
  const Clock::time_point end = parts_left_ == 0 ? end_time_ : Clock::now();
  return std::chrono::duration<double>(end - start_time_).count();
}

void CopyWork::part_started() {
  std::lock_guard lock(mutex_);
  if (started_) return;
  started_ = true;
  start_time_ = Clock::now();
}

void CopyWork::part_finished(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (error && !error_) error_ = std::move(error);
    if (--parts_left_ > 0) return;
    end_time_ = Clock::now();
    completed_.store(true, std::memory_order_release);
  }
  finished_.notify_all();
}

CopyEngine::CopyEngine(int threads) {
  TS_CHECK(threads >= 1, "a copy engine needs at least one thread, not {}", threads);
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run_parts(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a half-built engine: the threads already started must be
    // stopped here.
    stop_and_join();
    TS_FAIL("cannot start copy-engine thread {} of {}: {}; lower the number of copy threads", workers_.size() + 1,
            threads, e.what());
  }
}

CopyEngine::~CopyEngine() { stop_and_join(); }

void CopyEngine::stop_and_join() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

std::shared_ptr<CopyWork> CopyEngine::submit(std::function<void()> job) {
  std::vector<std::function<void()>> parts;
  parts.push_back(std::move(job));
  return submit_parts(std::move(parts));
}

std::shared_ptr<CopyWork> CopyEngine::submit_parts(std::vector<std::function<void()>> parts) {
  // make_shared cannot reach the private constructor.
  std::shared_ptr<CopyWork> work(new CopyWork(static_cast<int>(parts.size())));
  if (parts.empty()) return work;
  for (const std::function<void()>& part : parts) {
    TS_CHECK(part != nullptr, "a copy job has an empty function to run");
  }
  {
    std::lock_guard lock(mutex_);
    TS_CHECK(!stopping_, "a copy job was submitted to a copy engine that is shutting down");
    for (std::function<void()>& part : parts) queue_.push_back(Part{std::move(part), work});
  }
  if (parts.size() == 1) {
    queued_.notify_one();
  } else {
    queued_.notify_all();
  }
  return work;
}

void CopyEngine::run_parts() {
  for (;;) {
    Part part;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      // Stopping still drains the queue: a queued job's handle may be waited for elsewhere.
      if (queue_.empty()) return;
      part = std::move(queue_.front());
      queue_.pop_front();
    }
    part.work->part_started();
    std::exception_ptr error;
    try {
      part.run();
    } catch (...) {
      error = std::current_exception();
    }
    // What the job holds (a staging buffer, say) goes back before its waiter wakes.
    part.run = nullptr;
    part.work->part_finished(std::move(error));
  }
}

}  // namespace tessera::memory
