#include "dist/launch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/check.h"

namespace tessera::dist {

namespace {

int count_hostfile_hosts(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot read hostfile '{}': check the path (one host per line, e.g. 'node1 slots=8')", path);
  int hosts = 0;
  std::string line;
  while (std::getline(in, line)) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (words >> first) ++hosts;
  }
  TS_CHECK(hosts > 0, "hostfile '{}' lists no hosts", path);
  return hosts;
}

}  // namespace

MachineInfo this_machine(const LaunchRequest& request) {
  MachineInfo m;
  m.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  m.root = geteuid() == 0;
  if (!request.hostfile.empty()) m.hostfile_hosts = count_hostfile_hosts(request.hostfile);
  return m;
}

std::vector<std::string> mpirun_command(const LaunchRequest& r, const MachineInfo& machine) {
  TS_CHECK(r.ranks >= 1, "launch needs at least 1 rank, got -n {}", r.ranks);
  TS_CHECK(r.hosts.empty() || r.hostfile.empty(), "give either --hosts or --hostfile, not both");
  TS_CHECK(!r.executable.empty(), "launch needs the program to run");
  TS_CHECK(r.threads_per_rank >= 0, "threads per rank must be >= 0 (0: cores / ranks per node), got {}",
           r.threads_per_rank);
  const int hosts = !r.hosts.empty() ? static_cast<int>(r.hosts.size()) : !r.hostfile.empty() ? machine.hostfile_hosts : 1;
  TS_CHECK(hosts >= 1, "the hostfile '{}' lists no hosts", r.hostfile);
  // Nodes are assumed alike: ranks spread evenly, each node with this machine's core count.
  const int ranks_per_node = (r.ranks + hosts - 1) / hosts;
  const int threads = r.threads_per_rank > 0 ? r.threads_per_rank : std::max(1, machine.cores / ranks_per_node);

  std::vector<std::string> cmd{r.mpirun, "-n", std::to_string(r.ranks)};
  if (!r.hosts.empty()) {
    std::string list;
    for (const std::string& h : r.hosts) list += (list.empty() ? "" : ",") + h;
    cmd.insert(cmd.end(), {"--host", list});
  }
  if (!r.hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", r.hostfile});
  cmd.insert(cmd.end(), {"--bind-to", "none"});
  if (ranks_per_node > machine.cores) cmd.emplace_back("--oversubscribe");
  if (machine.root) cmd.emplace_back("--allow-run-as-root");
  if (r.hosts.empty() && r.hostfile.empty()) cmd.insert(cmd.end(), {"--mca", "btl", "self,vader"});
  cmd.insert(cmd.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", threads)});
  cmd.insert(cmd.end(), r.mpirun_args.begin(), r.mpirun_args.end());
  cmd.push_back(r.executable);
  cmd.insert(cmd.end(), r.args.begin(), r.args.end());
  return cmd;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./=:,@+%").find(c) != std::string_view::npos;
    });
    if (plain) {
      line += a;
    } else {
      line += '\'';
      for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += '\'';
    }
  }
  return line;
}

}  // namespace tessera::dist
