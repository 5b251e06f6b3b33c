#pragma once
// log.profile over a run (core/profiler.h): which steps are profiled, the profiler they record
// into, and at the end every rank's profile gathered at rank 0, which writes the run folder's
// trace.json (a Chrome trace: one row per rank, pid = rank) and profile.txt (each rank's table of
// category, ms per step, share of the step).
//
// The profiled steps are steps 2 to 4 that this process runs (the first pays one-time costs: page
// faults, buffers, JIT compilation), or its only step when it runs one.
#include <cstdint>
#include <optional>
#include <string>

#include "core/profiler.h"
#include "dist/communicator.h"

namespace tessera::train {

struct ProfileFiles {
  std::string trace_path;    // trace.json
  std::string profile_path;  // profile.txt
};

// Whether a process's `nth` step (from 1) of the `planned` it is to run is profiled.
bool profiles_step(int64_t nth, int64_t planned);
// "steps 2-4", "step 1" or "no step": the steps profiled, numbered as the run counts them (-1:
// none).
std::string profile_window(int64_t first, int64_t last);

class RunProfile {
 public:
  // `enabled`: log.profile; the process resumes after `first_step` steps and runs up to `steps`.
  RunProfile(bool enabled, int64_t first_step, int64_t steps);

  bool enabled() const { return profiler_.has_value(); }
  // Whether the step numbered `step` (the run's count, from 1) is profiled.
  bool profiles(int64_t step) const;
  // The step numbered `step` starts: when it is profiled, its profiler starts recording and is the
  // calling thread's current one until end(); returns it for exec::StepOptions (null: not profiled).
  Profiler* begin(int64_t step);
  // The step begun last ends (nothing when it was not profiled).
  void end();
  // Collective over `world` (null: one process). Rank 0 writes the files and gets its own table
  // back to print, followed by where the rest is; the other ranks get "".
  std::string finish(dist::Communicator* world, const ProfileFiles& files) const;

 private:
  int64_t first_step_, steps_;
  std::optional<Profiler> profiler_;
  std::optional<ProfilerInstall> installed_;
  int64_t profiled_first_ = -1, profiled_last_ = -1;
};

}  // namespace tessera::train
