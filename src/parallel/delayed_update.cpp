#include "parallel/delayed_update.h"

#include <algorithm>
#include <chrono>

#include <omp.h>

#include "core/check.h"
#include "ops/elementwise.h"

namespace tessera::parallel {

DelayedUpdate::DelayedUpdate(int64_t owned_elements, bool extrapolate, MemoryAccountant& memory)
    : values_(Tensor::empty({std::max<int64_t>(owned_elements, 1)}, DType::F32, MemoryTag::Optimizer, memory)),
      grads_(Tensor::empty({std::max<int64_t>(owned_elements, 1)}, DType::F32, MemoryTag::Optimizer, memory)),
      previous_(extrapolate ? Tensor::empty({std::max<int64_t>(owned_elements, 1)}, DType::F32, MemoryTag::Optimizer,
                                            memory)
                            : Tensor()),
      worker_([this] { work(); }) {}

DelayedUpdate::~DelayedUpdate() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void DelayedUpdate::work() {
  // The update shares the cores with the next step's forward and backward, which already use them
  // all: one thread keeps it from taking them over (the kernels' blocks, and so their bits, do not
  // depend on the number of threads). Its memory traffic and an offloaded state's disk reads are
  // what overlaps the compute.
  omp_set_num_threads(1);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || running_; });
    if (!running_) return;  // stopping with nothing queued
    std::function<void()> job = std::move(job_);
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    running_ = false;
    wake_.notify_all();
  }
}

void DelayedUpdate::start(optim::Optimizer& optimizer, float lr, std::span<const optim::Segment> segments) {
  TS_CHECK(!pending_, "a delayed update is still pending: apply it before starting the next");
  TS_CHECK(optim::total_elements(segments) <= values_.numel(),
           "the delayed update holds {} elements, the optimizer's segments {}", values_.numel(),
           optim::total_elements(segments));
  auto* values = values_.data<float>();
  auto* grads = grads_.data<float>();
  std::vector<optim::Segment> shadow(segments.begin(), segments.end());
  int64_t at = 0;
  for (optim::Segment& s : shadow) {
    if (!shadow_current_) ops::copy(values_.slice(0, at, at + s.size()), s.values());
    ops::copy(grads_.slice(0, at, at + s.size()), s.grads());
    s.value = values + at;
    s.grad = grads + at;
    at += s.size();
  }
  shadow_current_ = true;
  {
    std::lock_guard lock(mutex_);
    job_ = [this, &optimizer, lr, shadow = std::move(shadow)] {
      if (previous_.defined()) ops::copy(previous_, values_);
      optimizer.step(lr, shadow);
    };
    running_ = true;
    error_ = nullptr;
  }
  pending_ = true;
  wake_.notify_all();
}

bool DelayedUpdate::apply(std::span<const optim::Segment> segments, Weights weights) {
  TS_CHECK(weights == Weights::Updated || previous_.defined(),
           "the delayed update was built without extrapolation: it cannot write extrapolated weights");
  last_wait_seconds_ = 0;
  if (!pending_) {
    // Nothing running, but a guess may still stand in the master values (the step that computed on
    // it was skipped, an overflow, and started no update): the updated values replace it.
    if (weights == Weights::Extrapolated || !guess_in_master_) return false;
    copy_updated_values(segments);
    guess_in_master_ = false;
    return true;
  }
  const auto before = std::chrono::steady_clock::now();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return !running_; });
    error = error_;
  }
  last_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  pending_ = false;
  if (error) {
    shadow_current_ = false;  // the update stopped part way: its values are no one's
    std::rethrow_exception(error);
  }
  copy_updated_values(segments);
  guess_in_master_ = weights == Weights::Extrapolated;
  if (guess_in_master_) {
    int64_t at = 0;
    for (const optim::Segment& s : segments) {
      // The update's change, w_t - w_{t-1}, made in place of the values it started from (no longer
      // needed: the next update starts from w_t), then added to w_t.
      const Tensor change = previous_.slice(0, at, at + s.size());
      ops::scale(change, change, -1.0f);
      ops::add_inplace(change, values_.slice(0, at, at + s.size()));
      ops::add_inplace(s.values(), change);
      at += s.size();
    }
  }
  return true;
}

void DelayedUpdate::copy_updated_values(std::span<const optim::Segment> segments) const {
  int64_t at = 0;
  for (const optim::Segment& s : segments) {
    ops::copy(s.values(), values_.slice(0, at, at + s.size()));
    at += s.size();
  }
}

}  // namespace tessera::parallel
