#include "core/host.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/check.h"

namespace tessera::host {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return in ? load : 0.0;
}

double busy_seconds_of_proc_stat_line(std::string_view line, double ticks_per_second) {
  std::istringstream in{std::string(line)};
  std::string label;
  in >> label;
  // user nice system idle iowait irq softirq steal
  std::vector<double> fields;
  double value = 0;
  while (fields.size() < 8 && in >> value) fields.push_back(value);
  TS_CHECK(label == "cpu" && fields.size() == 8 && ticks_per_second > 0,
           "not the machine's line of /proc/stat (\"cpu\" and at least eight tick counts): \"{}\"", line);
  const double busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
  return busy / ticks_per_second;
}

CpuTimes cpu_times_now() {
  CpuTimes t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::ifstream in("/proc/stat");
  std::string line;
  if (std::getline(in, line)) t.machine_busy = busy_seconds_of_proc_stat_line(line, static_cast<double>(::sysconf(_SC_CLK_TCK)));
  auto seconds = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  rusage self{}, children{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &children);
  t.own = seconds(self) + seconds(children);
  return t;
}

double others_share(const CpuTimes& from, const CpuTimes& to, int cores) {
  const double wall = to.wall - from.wall;
  if (!(wall > 0) || cores < 1) return 0.0;
  const double others = (to.machine_busy - from.machine_busy) - (to.own - from.own);
  return std::clamp(others / (cores * wall), 0.0, 1.0);
}

ResidentSet resident_set() {
  ResidentSet r;
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    size_t kib = 0;
    if (key == "VmRSS:" && in >> kib) r.now = kib * 1024;
    if (key == "VmHWM:" && in >> kib) r.peak = kib * 1024;
    in.ignore(1 << 16, '\n');
  }
  return r;
}

}  // namespace tessera::host
