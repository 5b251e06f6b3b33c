#pragma once
// The end of a profiled run (log.profile, core/profiler.h): every rank's profile gathered at rank
// 0, which writes the run folder's trace.json (a Chrome trace: one row per rank, pid = rank) and
// profile.txt (each rank's table of category, ms per step, share of the step).
#include <string>

#include "core/profiler.h"
#include "dist/communicator.h"

namespace tessera::train {

struct ProfileFiles {
  std::string trace_path;    // trace.json
  std::string profile_path;  // profile.txt
};

// Collective over `world` (null: one process). Rank 0 writes the files and gets its own table back
// to print, followed by where the rest is; the other ranks get "".
std::string write_profile(const Profiler& profiler, dist::Communicator* world, const std::string& window,
                          const ProfileFiles& files);

// The run's profiled steps: steps 2 to 4 that this process runs (the first pays one-time costs:
// page faults, buffers, JIT compilation), or its only step when it runs one. `nth` counts this
// process's steps from 1; `planned` is how many it is to run.
bool profiles_step(int64_t nth, int64_t planned);
// "steps 2-4", "step 1" or "no step": the steps profiled, numbered as the run counts them (-1:
// none).
std::string profile_window(int64_t first, int64_t last);

}  // namespace tessera::train
