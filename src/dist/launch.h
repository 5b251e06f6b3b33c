#pragma once
// The mpirun command line `tessera launch` runs: a pure function of the request and the machine,
// so it is tested without starting anything.
//
//   mpirun -n N [--host h1:s,h2:s | --hostfile F] --bind-to none [--oversubscribe]
//          [--allow-run-as-root] [--mca btl self,vader] [--mca plm_rsh_agent AGENT]
//          [--mca btl_tcp_if_include NET --mca oob_tcp_if_include NET]
//          -x OMP_NUM_THREADS=T [extra...] EXE ARGS...
//
//  - --bind-to none: each rank runs an OpenMP pool and a progress thread; binding a rank to one
//    core (mpirun's default for few ranks) would squeeze them all onto it.
//  - --oversubscribe when a node gets more ranks than it has cores (tests run 4 ranks on 2 cores).
//  - T = max(1, cores / ranks per node), so the ranks of a node share its cores without
//    oversubscribing them with threads.
//  - --allow-run-as-root when running as root (containers); OpenMPI refuses otherwise.
//  - On one machine the transports are pinned to shared memory (btl self,vader), which also works
//    in containers without a network; across hosts MPI picks its network transport.
//  - Across hosts, a launch agent replaces ssh as the way mpirun starts its daemons on the other
//    hosts (any command called as `agent HOST COMMAND`: rsh, a site's wrapper, or the test
//    cluster's scripts/cluster-agent.sh), and a network (an interface name or a subnet such as
//    10.0.0.0/24) pins the ranks' TCP traffic and the daemons' to it, where hosts have several.
//
// Hosts are checked before anything starts, in the words of the command line: a slot count that
// is not a positive whole number, a host named twice, or fewer slots in all than ranks (mpirun
// would refuse with a screenful about "slots") fail naming the host and the fix. A host without
// ":slots" counts as one slot, as it does for mpirun.
#include <string>
#include <vector>

namespace tessera::dist {

struct Host {
  std::string name;
  int slots = 0;  // 0: not given
};

// "node1:8,node2:8" -> {node1, 8}, {node2, 8}; refuses empty names and bad slot counts.
std::vector<Host> parse_hosts(const std::string& list);
// One "name" or "name:slots" entry of --hosts.
Host parse_host(const std::string& entry);

struct LaunchRequest {
  int ranks = 1;
  std::vector<std::string> hosts{};   // "name" or "name:slots"; empty: this machine only
  std::string hostfile{};             // mpirun hostfile; exclusive with hosts
  int threads_per_rank = 0;         // 0: cores / ranks per node
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args{};  // passed to mpirun before the program
  std::string executable{};           // absolute path of the program every rank runs
  std::vector<std::string> args{};    // its arguments
  std::string job_status_dir{};       // given to the ranks as TESSERA_JOB_STATUS (dist/job_status.h); empty: none
  std::string launch_agent{};         // starts mpirun's daemons on other hosts instead of ssh; empty: ssh
  std::string network{};              // interface or subnet between hosts; empty: MPI chooses
};

struct MachineInfo {
  int cores = 1;
  bool root = false;
  // Whether the launcher's own stdout is a terminal. Under mpirun every rank's stdout is a pseudo
  // terminal whatever mpirun's output is, so the ranks are told (TESSERA_TERMINAL), and progress
  // bars are not drawn into a log file.
  bool terminal = false;
  // That terminal's width, passed on as COLUMNS so the ranks' progress bars fit it; 0: unknown.
  int columns = 0;
  int hostfile_hosts = 0;           // hosts listed in the request's hostfile (when there is one)
  std::vector<std::string> hostfile_names{};  // their names, in order
  std::vector<int> hostfile_slots{};  // their slots=K, in order; 0 where a line gives none
};

// Reads the core count, uid and hostfile; a hostfile line with a bad slots= fails naming the line.
MachineInfo this_machine(const LaunchRequest& request);
std::vector<std::string> mpirun_command(const LaunchRequest& request, const MachineInfo& machine);
// The command as one line a shell would accept (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace tessera::dist
