#pragma once
// Where a step's time goes (log.profile): scoped timers at the ops layer (every op's OpCall), at
// the communicator's waits, at the mixed-precision casts and around the interpreter's phases
// (forward, backward, recompute, transfers, optimizer step). Each scope records one trace event
// and adds its *self* time (its duration less that of the scopes opened inside it) to its
// category, so the categories of a step never add up to more than the step.
//
// The run owns the Profiler and hands it to the interpreter through exec::StepOptions; the trainer
// (for a profiled step) and the interpreter (for its run) make it the current profiler of their
// thread (ProfilerInstall), and the timers below find it with current_profiler(). When profiling is off that is a
// null pointer, and a timer costs one thread-local read and one test.
//
// Only the thread that runs the step records; work other threads do (a communicator's progress
// thread, a delayed update's worker) shows as the waits of the thread that needs it.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

enum class ProfileCategory {
  Gemm,           // matrix products (linear layers, their backward halves)
  Attention,      // attention forward/backward, rotary embeddings
  Norm,           // layernorm, rmsnorm
  Elementwise,    // activations, residual adds, biases, dropout
  Cast,           // f32 → bf16/f16 working copies of the weights
  Embedding,      // token and position embeddings, MoE gathers and scatters
  Loss,           // cross-entropy, MoE router losses
  Communication,  // waiting for collectives and pipeline transfers
  Optimizer,      // the optimizer-step action: gradient norm, clipping, the update
  Other,          // the rest of the step: the phases' own code, allocation, data, bookkeeping
};
inline constexpr size_t kProfileCategoryCount = 10;
// "gemm", "attention", "norm", "elementwise", "cast", "embedding", "loss", "communication",
// "optimizer", "other": the trace's "cat" and the table's rows.
const char* profile_category_name(ProfileCategory category);

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;

  // One trace event: a complete ("X") event of the Chrome trace format. `name` points to a string
  // that outlives the profiler (an op's name, a phase's name). unit and microbatch are -1 where
  // they do not apply.
  struct Event {
    const char* name;
    ProfileCategory category;
    double start_us;  // now_us() at its start
    double duration_us;
    int unit = -1;
    int microbatch = -1;
    int step = -1;  // the step it belongs to (its number in the run), for "step" events and the rest
    bool is_step = false;
  };

  // The step numbered `step` (the run's count) starts / ends on this rank. Scopes record only
  // between the two.
  void begin_step(int64_t step);
  void end_step();
  bool recording() const { return recording_; }

  // A scope's start and end; Scope below calls them.
  void open();
  void close(const char* name, ProfileCategory category, double start_us, double end_us, int unit, int microbatch);
  // The steady clock in microseconds: one clock for every process of a machine, so the ranks'
  // rows of a trace line up without a clock exchange.
  double now_us() const {
    return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  }

  // Steps recorded so far, their mean wall time, and each category's self time per step (Other
  // holds what no other category claimed, so the categories add up to the step).
  int steps() const { return static_cast<int>(step_count_); }
  double step_ms() const;
  std::array<double, kProfileCategoryCount> category_ms() const;
  const std::vector<Event>& events() const { return events_; }

  // The table of category, ms per step, share of the step; `title` heads it.
  std::string table(const std::string& title) const;
  // The events as Trace Event Format objects (comma separated, no brackets), pid `rank`, tid 0 (the
  // thread that ran the steps), and the process's and thread's names; the caller joins the ranks'
  // lists into one traceEvents array.
  std::string trace_events_json(int rank, const std::string& process_name) const;

 private:
  struct Open {
    double child_us = 0;  // the time of the scopes closed inside it
  };
  bool recording_ = false;
  int64_t current_step_ = -1;
  double step_start_us_ = 0;
  int64_t step_count_ = 0;
  double step_total_us_ = 0;
  std::array<double, kProfileCategoryCount> self_us_{};
  std::vector<Open> stack_;
  std::vector<Event> events_;
};

// The profiler of the calling thread's step, null when none. A thread-local and not an argument:
// the ops take tensors only (their signatures are the one seam nn, optim, parallel and the tests
// share), and a communicator's wait or a working copy's cast is reached from code that has no
// step context either; threading an observer that changes no result through all of them would
// widen every signature. It is set only by ProfilerInstall, for the length of one step or
// interpreter run, on the thread that runs it, so no state outlives a step or crosses threads.
Profiler* current_profiler();

// Makes `profiler` (may be null) the calling thread's current one until the end of the scope.
class ProfilerInstall {
 public:
  explicit ProfilerInstall(Profiler* profiler);
  ~ProfilerInstall();
  ProfilerInstall(const ProfilerInstall&) = delete;
  ProfilerInstall& operator=(const ProfilerInstall&) = delete;

 private:
  Profiler* previous_;
};

// Times its lifetime into `profiler` under `category` when the profiler is recording; a null
// profiler costs one test.
class ProfileScope {
 public:
  ProfileScope(Profiler* profiler, const char* name, ProfileCategory category, int unit = -1, int microbatch = -1)
      : profiler_(profiler != nullptr && profiler->recording() ? profiler : nullptr),
        name_(name),
        category_(category),
        unit_(unit),
        microbatch_(microbatch) {
    if (profiler_) {
      start_us_ = profiler_->now_us();
      profiler_->open();
    }
  }
  // The calling thread's current profiler.
  ProfileScope(const char* name, ProfileCategory category) : ProfileScope(current_profiler(), name, category) {}
  ~ProfileScope() {
    if (profiler_) profiler_->close(name_, category_, start_us_, profiler_->now_us(), unit_, microbatch_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profiler* profiler_;
  const char* name_;
  ProfileCategory category_;
  int unit_, microbatch_;
  double start_us_ = 0;
};

}  // namespace tessera
