#pragma once
// What the machine a process runs on says of itself (Linux /proc): its CPU's name, its load, and
// how much of its cores other processes took over an interval. Measurements of speed (the
// planner's calibration, the MFU peak) read these to say when a figure was taken on a busy machine
// and is therefore too slow to stand for it.
#include <string>
#include <string_view>

namespace tessera::host {

// The "model name" of /proc/cpuinfo; "unknown CPU" where there is none.
std::string cpu_model();

// The load average over the last minute; 0 where the system does not say.
double load_average();

// This process's resident set now, and its highest so far (VmRSS and VmHWM of /proc/self/status),
// in bytes; 0 where the system does not say.
struct ResidentSet {
  size_t now = 0;
  size_t peak = 0;
};
ResidentSet resident_set();

// CPU seconds spent so far: by the whole machine (every core's busy time, hypervisor steal
// included, since a stolen core did none of this process's work) and by this process with the
// children it has waited for; and a steady clock in seconds.
struct CpuTimes {
  double machine_busy = 0;
  double own = 0;
  double wall = 0;
};
CpuTimes cpu_times_now();

// The busy seconds of the first ("cpu ") line of /proc/stat, whose fields count clock ticks of
// `ticks_per_second`: user, nice, system, irq, softirq and steal (idle and iowait are not busy;
// guest time is already inside user). Throws on a line that is not such a line.
double busy_seconds_of_proc_stat_line(std::string_view line, double ticks_per_second);

// The share of the machine's `cores` that other processes kept busy between two readings:
// (machine busy - own) / (cores x wall), clamped to [0, 1].
double others_share(const CpuTimes& from, const CpuTimes& to, int cores);

}  // namespace tessera::host
