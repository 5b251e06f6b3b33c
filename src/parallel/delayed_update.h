#pragma once
// ZeRO-Offload's delayed parameter update (Ren et al. 2021, §4.2): the optimizer step of step t runs
// on a thread of its own while step t + 1's forward and backward run on the weights from before it,
// so the step's time hides behind the next step's compute at the price of gradients one step stale.
//
// The update cannot write the parameters the next step is reading, nor read the gradients it is
// writing: it runs on shadow copies of the master values and of the gradients (this rank's owned
// elements, two more copies of them, under MemoryTag::Optimizer), and its result is copied into
// the master values when the next optimizer step begins — after that step's backward, before its
// own update starts. Whatever the optimizer does within its step stays as it is: the segments it
// is given differ only in where the values and gradients live. It must not communicate (the main
// thread's collectives run meanwhile): the engine refuses the optimizers whose step sums
// statistics over ranks.
//
// With extrapolation (SpecTrain, Chen et al. 2018; PipeMare's discrepancy correction), the next
// step does not compute on the weights from before the update but on a guess of those after it:
// the last update's change added once more, w_t + (w_t - w_{t-1}). Adam's updates follow their
// momentum from step to step, so the guess takes back most of the staleness; it costs one more
// copy of the owned values (those the update started from). The guess is only ever what a step
// computes on: evaluations, samples and checkpoints get the updated values themselves.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace tessera::parallel {

class DelayedUpdate {
 public:
  // `extrapolate`: apply() may write the extrapolated weights (above), for which the update keeps
  // the values it started from.
  DelayedUpdate(int64_t owned_elements, bool extrapolate, MemoryAccountant& memory);
  // Waits for an update still running (its result is then dropped, as the run is ending).
  ~DelayedUpdate();
  DelayedUpdate(const DelayedUpdate&) = delete;
  DelayedUpdate& operator=(const DelayedUpdate&) = delete;

  // Starts `optimizer`'s step with learning rate `lr` over `segments`' gradients as they are now,
  // on the shadow copies, and returns at once. No update may be pending (apply() first).
  void start(optim::Optimizer& optimizer, float lr, std::span<const optim::Segment> segments);
  // Waits for the pending update, if any, and copies its values into `segments` (the same segments
  // it started with); rethrows what the update threw. Returns whether there was one: the values
  // changed, and what derives from them (ZeRO's gathered copies, 16-bit working copies) must follow.
  // `Weights::Extrapolated` (built with `extrapolate`) writes w_t + (w_t - w_{t-1}) instead, for
  // the next step to compute on; the next start() still steps from the updated values. Applying
  // `Weights::Updated` with nothing pending replaces a guess still in the values with the updated
  // values (and returns true), so that a checkpoint never holds a guess.
  enum class Weights : uint8_t { Updated, Extrapolated };
  bool apply(std::span<const optim::Segment> segments, Weights weights = Weights::Updated);
  bool pending() const { return pending_; }
  // Seconds the last apply() waited for the update to finish: the part of the step it did not hide.
  double last_wait_seconds() const { return last_wait_seconds_; }
  // After the master values changed from outside (a checkpoint load): the shadow values are copied
  // from them again at the next start.
  void forget_values() { shadow_current_ = false; }

 private:
  void work();
  void copy_updated_values(std::span<const optim::Segment> segments) const;

  Tensor values_;  // [owned elements]: the master values the pending update writes
  Tensor grads_;   // [owned elements]: the gradients it reads
  // [owned elements] with extrapolation, else empty: the values the pending update started from.
  Tensor previous_;
  // Whether values_ holds the updated values (they are copied from the master values only when it
  // does not; with extrapolation the master values may hold the guess instead).
  bool shadow_current_ = false;
  // Whether the master values hold a guess (the last apply wrote Weights::Extrapolated).
  bool guess_in_master_ = false;
  bool pending_ = false;
  double last_wait_seconds_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::function<void()> job_;  // set: a job to run; cleared by the worker when done
  bool running_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  // One long-lived worker: the optimizer's parallel kernels keep their thread pool across steps.
  // Last, so that it starts once everything it reads is built.
  std::thread worker_;
};

}  // namespace tessera::parallel
