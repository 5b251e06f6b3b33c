#include "dist/work.h"

#include <fmt/format.h>

#include "core/profiler.h"

namespace tessera::dist {

Work::Work(OpKind kind, uint64_t seq, uint64_t bytes_sent, int peer)
    : kind_(kind), seq_(seq), bytes_(bytes_sent), peer_(peer), posted_(std::chrono::steady_clock::now()) {}

namespace {
// The profiler's name of a wait (a literal, which outlives the trace).
const char* wait_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "wait all_reduce";
    case OpKind::ReduceScatter: return "wait reduce_scatter";
    case OpKind::AllGather: return "wait all_gather";
    case OpKind::Broadcast: return "wait broadcast";
    case OpKind::AllToAll: return "wait all_to_all";
    case OpKind::Send: return "wait send";
    case OpKind::Recv: return "wait recv";
    case OpKind::Barrier: return "wait barrier";
    case OpKind::Split: return "wait split";
  }
  return "wait";
}
}  // namespace

void Work::wait() {
  // The time the step stood still for communication.
  const ProfileScope timer(wait_name(kind_), ProfileCategory::Communication);
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait_started() {
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return started_ || done_; });
}

bool Work::is_completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

double Work::seconds() const {
  std::lock_guard lock(mutex_);
  return done_ ? std::chrono::duration<double>(finished_ - posted_).count() : 0.0;
}

std::string Work::describe() const {
  if (kind_ == OpKind::Send) return fmt::format("send #{} to rank {}", seq_, peer_);
  if (kind_ == OpKind::Recv) return fmt::format("recv #{} from rank {}", seq_, peer_);
  return fmt::format("{} #{}", op_name(kind_), seq_);
}

void Work::mark_started() {
  {
    std::lock_guard lock(mutex_);
    started_ = true;
  }
  done_cv_.notify_all();
}

void Work::mark_completed() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    finished_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

void Work::mark_failed(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    finished_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

void wait_all(std::span<const WorkPtr> works) {
  std::exception_ptr first;
  for (const WorkPtr& w : works) {
    try {
      w->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace tessera::dist
