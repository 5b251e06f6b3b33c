#include "dist/launch.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "dist/job_status.h"

namespace tessera::dist {

namespace {

// A slot count as written after "name:" or "slots=": a whole number from 1 up. Nullopt when the
// text is not a whole number at all; 0 is returned as 0 for the caller to name.
std::optional<int> whole_number(std::string_view text) {
  const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (text.empty() || text.size() > 9 || !digits) return std::nullopt;
  return std::stoi(std::string(text));
}

struct HostfileInfo {
  int hosts = 0;
  std::vector<std::string> names;
  std::vector<int> slots;  // per host, 0 where the line gives none
};

HostfileInfo read_hostfile(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot read hostfile '{}': check the path (one host per line, e.g. 'node1 slots=8')", path);
  HostfileInfo info;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    ++info.hosts;
    info.names.push_back(host);
    int slots = 0;
    for (std::string word; words >> word;) {
      if (!word.starts_with("slots=")) continue;
      const std::string count = word.substr(6);
      const std::optional<int> n = whole_number(count);
      TS_CHECK(n.has_value() && *n >= 1,
               "hostfile '{}' line {}: host {} has slots={}; give a whole number from 1 up (e.g. '{} slots=8')", path,
               number, host, count, host);
      slots = *n;
    }
    info.slots.push_back(slots);
  }
  TS_CHECK(info.hosts > 0, "hostfile '{}' lists no hosts", path);
  return info;
}

// Ranks land on hosts in order, each filled to its slots before the next (mpirun's default
// mapping); the most any host gets decides the threads per rank.
int most_ranks_on_a_host(int ranks, const std::vector<int>& slots) {
  int most = 0;
  for (int s : slots) {
    const int here = std::min(s, ranks);
    most = std::max(most, here);
    ranks -= here;
  }
  return most;
}

std::string join_hosts(const std::vector<std::string>& hosts) {
  std::string list;
  for (const std::string& h : hosts) list += (list.empty() ? "" : ",") + h;
  return list;
}

}  // namespace

Host parse_host(const std::string& entry) {
  const auto colon = entry.rfind(':');
  Host h{colon == std::string::npos ? entry : entry.substr(0, colon), 0};
  TS_CHECK(!h.name.empty(), "--hosts: '{}' has no host name; write name or name:slots, such as node1:8", entry);
  if (colon == std::string::npos) return h;
  const std::string count = entry.substr(colon + 1);
  const std::optional<int> n = whole_number(count);
  TS_CHECK(n.has_value(),
           "--hosts: the slot count of host {} is '{}', not a whole number; write name:slots, such as {}:8", h.name,
           count, h.name);
  TS_CHECK(*n >= 1, "--hosts: {} gives host {} no slots; give it at least 1 (such as {}:8) or leave the host out",
           entry, h.name, h.name);
  h.slots = *n;
  return h;
}

std::vector<Host> parse_hosts(const std::string& list) {
  std::vector<Host> hosts;
  std::istringstream entries(list);
  for (std::string entry; std::getline(entries, entry, ',');) {
    TS_CHECK(!entry.empty(),
             "--hosts '{}' has an empty entry; separate hosts with single commas, such as node1:8,node2:8", list);
    hosts.push_back(parse_host(entry));
  }
  TS_CHECK(!hosts.empty() && !list.ends_with(","),
           "--hosts '{}' names no host, or ends with a comma; give name or name:slots entries such as node1:8,node2:8",
           list);
  return hosts;
}

MachineInfo this_machine(const LaunchRequest& request) {
  MachineInfo m;
  m.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  m.root = geteuid() == 0;
  m.terminal = ::isatty(STDOUT_FILENO) == 1;
  winsize size{};
  if (m.terminal && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) m.columns = size.ws_col;
  if (!request.hostfile.empty()) {
    const HostfileInfo file = read_hostfile(request.hostfile);
    m.hostfile_hosts = file.hosts;
    m.hostfile_slots = file.slots;
    m.hostfile_names = file.names;
  }
  return m;
}

std::vector<std::string> mpirun_command(const LaunchRequest& r, const MachineInfo& machine) {
  TS_CHECK(r.ranks >= 1, "-n must be at least 1 (the number of processes to start), got {}", r.ranks);
  TS_CHECK(r.hosts.empty() || r.hostfile.empty(), "give either --hosts or --hostfile, not both");
  TS_CHECK(!r.executable.empty(), "launch needs the program to run");
  TS_CHECK(r.threads_per_rank >= 0, "threads per rank must be >= 0 (0: cores / ranks per node), got {}",
           r.threads_per_rank);
  const int hosts = !r.hosts.empty() ? static_cast<int>(r.hosts.size()) : !r.hostfile.empty() ? machine.hostfile_hosts : 1;
  TS_CHECK(hosts >= 1, "the hostfile '{}' lists no hosts", r.hostfile);
  const bool several_hosts = !r.hosts.empty() || !r.hostfile.empty();
  TS_CHECK(r.launch_agent.empty() || several_hosts,
           "--launch-agent '{}' starts mpirun's daemons on other hosts, but no hosts are given; add --hosts or "
           "--hostfile, or leave --launch-agent out to run on this machine",
           r.launch_agent);
  TS_CHECK(r.network.empty() || several_hosts,
           "--network '{}' picks the network between hosts, but no hosts are given; add --hosts or --hostfile, or "
           "leave --network out (on one machine the ranks talk through shared memory)",
           r.network);
  TS_CHECK(r.network.find_first_of(" \t") == std::string::npos,
           "--network '{}': give one interface name (such as eth0) or subnet (such as 10.0.0.0/24), or several "
           "separated by commas without spaces",
           r.network);

  // Slots of every host, where all are known: a bare --hosts name is one slot, as for mpirun; a
  // hostfile line without slots= lets mpirun count the host's cores, which only that host knows.
  std::vector<int> slots;
  if (!r.hosts.empty()) {
    std::vector<std::string> names;
    for (const std::string& entry : r.hosts) {
      const Host h = parse_host(entry);
      TS_CHECK(std::find(names.begin(), names.end(), h.name) == names.end(),
               "--hosts names host {} twice; give each host once, with all its slots (such as {}:8)", h.name, h.name);
      names.push_back(h.name);
      slots.push_back(std::max(1, h.slots));
    }
    int total = 0;
    for (int s : slots) total += s;
    const int even = (r.ranks + hosts - 1) / hosts;
    std::vector<std::string> suggestion;
    for (const std::string& n : names) suggestion.push_back(fmt::format("{}:{}", n, even));
    TS_CHECK(total >= r.ranks,
             "--hosts {} offers {} slot(s) in all, fewer than the {} ranks of -n {}; give the hosts more slots (such "
             "as --hosts {}) or lower -n (a host without ':slots' counts as 1 slot, as for mpirun)",
             join_hosts(r.hosts), total, r.ranks, r.ranks, join_hosts(suggestion));
  } else if (!r.hostfile.empty() && static_cast<int>(machine.hostfile_slots.size()) == hosts &&
             std::all_of(machine.hostfile_slots.begin(), machine.hostfile_slots.end(), [](int s) { return s > 0; })) {
    slots = machine.hostfile_slots;
    int total = 0;
    for (int s : slots) total += s;
    TS_CHECK(total >= r.ranks,
             "hostfile '{}' offers {} slot(s) in all, fewer than the {} ranks of -n {}; raise the slots= of its hosts "
             "or lower -n",
             r.hostfile, total, r.ranks, r.ranks);
  }
  // Nodes are assumed alike: each with this machine's core count.
  const int ranks_per_node = !slots.empty() ? most_ranks_on_a_host(r.ranks, slots) : (r.ranks + hosts - 1) / hosts;
  const int threads = r.threads_per_rank > 0 ? r.threads_per_rank : std::max(1, machine.cores / ranks_per_node);

  std::vector<std::string> cmd{r.mpirun, "-n", std::to_string(r.ranks)};
  if (!r.hosts.empty()) cmd.insert(cmd.end(), {"--host", join_hosts(r.hosts)});
  if (!r.hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", r.hostfile});
  cmd.insert(cmd.end(), {"--bind-to", "none"});
  if (ranks_per_node > machine.cores) cmd.emplace_back("--oversubscribe");
  if (machine.root) cmd.emplace_back("--allow-run-as-root");
  if (!several_hosts) cmd.insert(cmd.end(), {"--mca", "btl", "self,vader"});
  if (!r.launch_agent.empty()) cmd.insert(cmd.end(), {"--mca", "plm_rsh_agent", r.launch_agent});
  if (!r.network.empty()) {
    cmd.insert(cmd.end(), {"--mca", "btl_tcp_if_include", r.network, "--mca", "oob_tcp_if_include", r.network});
  }
  cmd.insert(cmd.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", threads)});
  cmd.insert(cmd.end(), {"-x", fmt::format("TESSERA_TERMINAL={}", machine.terminal ? 1 : 0)});
  if (machine.columns > 0) cmd.insert(cmd.end(), {"-x", fmt::format("COLUMNS={}", machine.columns)});
  if (!r.job_status_dir.empty()) cmd.insert(cmd.end(), {"-x", fmt::format("{}={}", kJobStatusVariable, r.job_status_dir)});
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
