#pragma once
// A timeline recorder: when each action of one program started and ended on this rank, in seconds
// since the program began (this process's steady clock). The interpreter fills it for a run whose
// StepOptions::timeline points to one, and does nothing more than test a null pointer otherwise,
// so recording costs two clock reads per action when on and nothing when off.
//
// What an action's span covers is everything the rank did for it:
//   unit actions    the transforms around the unit (before and after) and the unit itself
//   Send            posting the transfer (it completes in the background)
//   Recv            waiting for the data, right before the unit action that reads it: the time the
//                   rank stood still for its neighbour
//   OptimizerStep   completing the sends, the transforms' finish (gradient reductions), the
//                   callback (tied gradients, norm, optimizer)
// Spans never overlap, and follow the program's order except in one place: a receive's span comes
// right before the unit action that reads its tensor (exec/interpreter.h), wherever the list
// places the receive.
//
// parallel/pipeline_timeline.h turns the spans of every pipeline rank into one timeline of the
// schedule's instructions on a common clock.
#include <chrono>
#include <cstddef>
#include <vector>

namespace tessera::exec {

class TimelineRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  struct Span {
    double start = -1;  // seconds since the program began; -1: the action did not run
    double end = -1;
  };

  // A program of `actions` actions begins now; forgets the previous program's spans.
  void begin(size_t actions) {
    origin_ = Clock::now();
    spans_.assign(actions, Span{});
  }
  void start(size_t action) { spans_[action].start = now(); }
  void end(size_t action) { spans_[action].end = now(); }

  // Seconds since begin().
  double now() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  const std::vector<Span>& spans() const { return spans_; }  // [action index of the program]

 private:
  Clock::time_point origin_;
  std::vector<Span> spans_;
};

}  // namespace tessera::exec
