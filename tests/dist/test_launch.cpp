// The mpirun command `tessera launch` builds, for several machines, without running it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <functional>

#include "cli_runner.h"
#include "core/check.h"
#include "dist/launch.h"

using namespace tessera;
using namespace tessera::dist;

namespace {

bool has(const std::vector<std::string>& cmd, const std::string& word) {
  return std::find(cmd.begin(), cmd.end(), word) != cmd.end();
}

std::string after(const std::vector<std::string>& cmd, const std::string& word) {
  auto it = std::find(cmd.begin(), cmd.end(), word);
  return it == cmd.end() || it + 1 == cmd.end() ? "" : *(it + 1);
}

}  // namespace

TEST(Launch, OneMachineOversubscribedAsRoot) {
  LaunchRequest r{.ranks = 4, .executable = "/opt/tessera/bin/tessera", .args = {"train", "--config", "a b.toml"}};
  const auto cmd = mpirun_command(r, MachineInfo{.cores = 2, .root = true});
  EXPECT_EQ(cmd[0], "mpirun");
  EXPECT_EQ(after(cmd, "-n"), "4");
  EXPECT_TRUE(has(cmd, "--oversubscribe"));
  EXPECT_TRUE(has(cmd, "--allow-run-as-root"));
  EXPECT_EQ(after(cmd, "--bind-to"), "none");
  EXPECT_EQ(after(cmd, "btl"), "self,vader");
  EXPECT_EQ(after(cmd, "-x"), "OMP_NUM_THREADS=1");  // 2 cores / 4 ranks, at least 1
  // The ranks learn whether the launcher's output is a terminal (theirs always looks like one).
  EXPECT_TRUE(has(cmd, "TESSERA_TERMINAL=0"));
  EXPECT_TRUE(has(mpirun_command(r, MachineInfo{.cores = 2, .terminal = true}), "TESSERA_TERMINAL=1"));
  // The program and its arguments come last, unchanged.
  ASSERT_GE(cmd.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(cmd.end() - 4, cmd.end()),
            (std::vector<std::string>{"/opt/tessera/bin/tessera", "train", "--config", "a b.toml"}));
  EXPECT_NE(shell_line(cmd).find("--config 'a b.toml'"), std::string::npos) << shell_line(cmd);
}

TEST(Launch, ThreadsShareTheCoresWithoutOversubscribing) {
  LaunchRequest r{.ranks = 2, .executable = "/bin/tessera"};
  const auto cmd = mpirun_command(r, MachineInfo{.cores = 16, .root = false});
  EXPECT_FALSE(has(cmd, "--oversubscribe"));
  EXPECT_FALSE(has(cmd, "--allow-run-as-root"));
  EXPECT_EQ(after(cmd, "-x"), "OMP_NUM_THREADS=8");
  r.threads_per_rank = 3;
  EXPECT_EQ(after(mpirun_command(r, MachineInfo{.cores = 16}), "-x"), "OMP_NUM_THREADS=3");
}

TEST(Launch, SeveralHostsSpreadRanksAndLeaveTransportsToMpi) {
  LaunchRequest r{.ranks = 16, .hosts = {"node1:8", "node2:8"}, .executable = "/bin/tessera"};
  const auto cmd = mpirun_command(r, MachineInfo{.cores = 16});
  EXPECT_EQ(after(cmd, "--host"), "node1:8,node2:8");
  EXPECT_EQ(after(cmd, "-x"), "OMP_NUM_THREADS=2");  // 8 ranks per node on 16 cores
  EXPECT_FALSE(has(cmd, "--oversubscribe"));
  EXPECT_FALSE(has(cmd, "btl"));

  const std::string path = ::testing::TempDir() + "tessera_launch_hostfile";
  {
    std::ofstream f(path);
    f << "# cluster\nnode1 slots=4\n\nnode2 slots=4  # second\nnode3 slots=4\n";
  }
  LaunchRequest h{.ranks = 12, .hostfile = path, .executable = "/bin/tessera"};
  const MachineInfo m = this_machine(h);
  EXPECT_EQ(m.hostfile_hosts, 3);
  const auto hcmd = mpirun_command(h, MachineInfo{.cores = 8, .hostfile_hosts = m.hostfile_hosts});
  EXPECT_EQ(after(hcmd, "--hostfile"), path);
  EXPECT_EQ(after(hcmd, "-x"), "OMP_NUM_THREADS=2");  // 4 ranks per node on 8 cores
  std::remove(path.c_str());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Launch, HostListsAreParsedAndTheirSlotCountsChecked) {
  const std::vector<Host> hosts = parse_hosts("node1:8,node2,node3:16");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "node1");
  EXPECT_EQ(hosts[0].slots, 8);
  EXPECT_EQ(hosts[1].name, "node2");
  EXPECT_EQ(hosts[1].slots, 0);
  EXPECT_EQ(hosts[2].slots, 16);

  EXPECT_EQ(error_of([] { parse_hosts("node1:0"); }),
            "--hosts: node1:0 gives host node1 no slots; give it at least 1 (such as node1:8) or leave the host out");
  EXPECT_EQ(error_of([] { parse_hosts("node1:x"); }),
            "--hosts: the slot count of host node1 is 'x', not a whole number; write name:slots, such as node1:8");
  EXPECT_NE(error_of([] { parse_hosts("node1:-4"); }).find("slot count of host node1 is '-4'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts("node1:8,,node2:8"); }).find("an empty entry"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts(":8"); }).find("':8' has no host name"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hosts("node1:8,"); }).find("ends with a comma"), std::string::npos);
}

TEST(Launch, FewerSlotsThanRanksNameTheHostsAndTheFix) {
  const auto request = [](int ranks, std::vector<std::string> hosts) {
    return LaunchRequest{.ranks = ranks, .hosts = std::move(hosts), .executable = "/bin/tessera"};
  };
  const std::string e = error_of([&] { mpirun_command(request(16, {"node1:4", "node2:4"}), MachineInfo{.cores = 8}); });
  EXPECT_NE(e.find("--hosts node1:4,node2:4 offers 8 slot(s) in all, fewer than the 16 ranks of -n 16"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--hosts node1:8,node2:8"), std::string::npos) << e;
  // A bare name is one slot, as for mpirun.
  EXPECT_NE(error_of([&] { mpirun_command(request(3, {"a", "b"}), MachineInfo{}); }).find("offers 2 slot(s)"),
            std::string::npos);
  EXPECT_NO_THROW(mpirun_command(request(2, {"a", "b"}), MachineInfo{}));
  EXPECT_NE(error_of([&] { mpirun_command(request(2, {"a:1", "a:1"}), MachineInfo{}); }).find("names host a twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { mpirun_command(request(2, {"a:0"}), MachineInfo{}); }).find("gives host a no slots"),
            std::string::npos);
  // Ranks fill the first host's slots before the next: 12 of -n 16 on node1, so 16 / 12 -> 1 thread.
  const auto cmd = mpirun_command(request(16, {"node1:12", "node2:12"}), MachineInfo{.cores = 16});
  EXPECT_EQ(after(cmd, "-x"), "OMP_NUM_THREADS=1");
}

TEST(Launch, HostfileSlotCountsAreChecked) {
  const std::string path = ::testing::TempDir() + "tessera_launch_bad_hostfile";
  {
    std::ofstream f(path);
    f << "node1 slots=4\nnode2 slots=0\n";
  }
  EXPECT_NE(error_of([&] { this_machine(LaunchRequest{.hostfile = path}); })
                .find("line 2: host node2 has slots=0; give a whole number from 1 up"),
            std::string::npos);
  {
    std::ofstream f(path);
    f << "node1 slots=4\nnode2 slots=four\n";
  }
  EXPECT_NE(error_of([&] { this_machine(LaunchRequest{.hostfile = path}); }).find("host node2 has slots=four"),
            std::string::npos);
  {
    std::ofstream f(path);
    f << "node1 slots=4\nnode2 slots=4\n";
  }
  LaunchRequest r{.ranks = 12, .hostfile = path, .executable = "/bin/tessera"};
  const MachineInfo m = this_machine(r);
  EXPECT_EQ(m.hostfile_slots, (std::vector<int>{4, 4}));
  EXPECT_NE(error_of([&] { mpirun_command(r, m); }).find("offers 8 slot(s) in all, fewer than the 12 ranks of -n 12"),
            std::string::npos);
  r.ranks = 8;
  EXPECT_NO_THROW(mpirun_command(r, m));
  std::remove(path.c_str());
}

// Another way than ssh to start the daemons (the test cluster's agent, rsh, a site's wrapper), and
// the network the ranks and daemons keep to.
TEST(Launch, ALaunchAgentAndANetworkGoToMpirun) {
  LaunchRequest r{.ranks = 2, .hosts = {"node1:1", "node2:1"}, .executable = "/bin/tessera"};
  r.launch_agent = "/opt/cluster-agent.sh";
  r.network = "10.0.0.0/24";
  const auto cmd = mpirun_command(r, MachineInfo{.cores = 2});
  EXPECT_EQ(after(cmd, "plm_rsh_agent"), "/opt/cluster-agent.sh");
  EXPECT_EQ(after(cmd, "btl_tcp_if_include"), "10.0.0.0/24");
  EXPECT_EQ(after(cmd, "oob_tcp_if_include"), "10.0.0.0/24");
  EXPECT_FALSE(has(cmd, "self,vader"));
  const auto plain = mpirun_command(LaunchRequest{.ranks = 2, .hosts = {"node1:1", "node2:1"}, .executable = "x"},
                                    MachineInfo{.cores = 2});
  EXPECT_FALSE(has(plain, "plm_rsh_agent"));
  EXPECT_FALSE(has(plain, "btl_tcp_if_include"));
  r.network = "eth0, eth1";
  EXPECT_NE(error_of([&] { mpirun_command(r, MachineInfo{}); }).find("without spaces"), std::string::npos);
}

TEST(Launch, BadRequestsAreRefusedWithAReason) {
  EXPECT_EQ(error_of([] { mpirun_command(LaunchRequest{.ranks = 0, .executable = "x"}, MachineInfo{}); }),
            "-n must be at least 1 (the number of processes to start), got 0");
  EXPECT_THROW(mpirun_command(LaunchRequest{.ranks = 2, .hosts = {"a"}, .hostfile = "f", .executable = "x"}, MachineInfo{}),
               Error);
  EXPECT_THROW(mpirun_command(LaunchRequest{.ranks = 2}, MachineInfo{}), Error);
  try {
    this_machine(LaunchRequest{.hostfile = "/nonexistent/hostfile"});
    FAIL() << "a missing hostfile was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read hostfile '/nonexistent/hostfile'"), std::string::npos);
  }
}

// The same through the real `tessera launch` command line (--dry-run: nothing is started).
TEST(LaunchCommand, TheReadmeMultiNodeExampleParses) {
  // --hosts right before "--" used to take the "--" as the end of its list, leaving the command's
  // own options to launch.
  const tessera::testing::CliResult r =
      tessera::testing::run_tessera("launch --dry-run -n 16 --hosts node1:8,node2:8 -- train --config run.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpirun -n 16 --host node1:8,node2:8 --bind-to none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tessera train --config run.toml\n"), std::string::npos) << r.output;
}

TEST(LaunchCommand, BadValuesGetOneClearLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-n 0 -- train", "error: -n must be at least 1 (the number of processes to start), got 0"},
      {"-n -2 -- train", "error: -n must be at least 1 (the number of processes to start), got -2"},
      {"-n 2 --threads 0 -- train", "error: --threads must be at least 1, got 0"},
      {"-n 4 --hosts node1:0 -- train", "error: --hosts: node1:0 gives host node1 no slots"},
      {"-n 4 --hosts node1:x -- train", "error: --hosts: the slot count of host node1 is 'x', not a whole number"},
      {"-n 16 --hosts node1:4,node2:4 -- train", "error: --hosts node1:4,node2:4 offers 8 slot(s) in all, fewer than"},
      {"-n 2 train --config run.toml", "error: launch: '--config' is not an option of launch; put the tessera command"},
      {"-n 2 -- trian --config run.toml", "error: launch: unknown command 'trian' after \"--\"; did you mean 'train'?"},
      {"-n 2 -- tessera train", "drop 'tessera'"},
      {"-n 2", "error: launch: give the tessera command to run after \"--\""},
      {"-n two -- train", "error: --ranks takes a number, got 'two'"},
      {"-n 2 --launch-agent rsh -- train", "error: --launch-agent 'rsh' starts mpirun's daemons on other hosts, but no hosts"},
      {"-n 2 --network eth0 -- train", "error: --network 'eth0' picks the network between hosts, but no hosts are given"},
      {"-n 2 --hosts a,b --launch-agent ./no/such/agent -- train",
       "error: launch: --launch-agent './no/such/agent' is not an executable file"},
  };
  for (const auto& [args, message] : cases) {
    const tessera::testing::CliResult r = tessera::testing::run_tessera("launch --dry-run " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("mpirun -n"), std::string::npos) << args << "\n" << r.output;
    EXPECT_LT(r.output.size(), 400u) << args << "\n" << r.output;  // no 309-digit range
  }
}

// Open MPI 4's session files go under a folder of the launch's own, not the one every job of the
// user shares, which two jobs starting at once could both find missing. A stand-in for mpirun
// records what it was given, for two launches.
TEST(LaunchCommand, EachOneMachineJobKeepsMpisSessionFilesInAFolderOfItsOwn) {
  const std::string dir = ::testing::TempDir() + "tessera_launch_session_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string fake = dir + "/mpirun";
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\necho \"$OMPI_MCA_orte_tmpdir_base\" >> " << dir << "/seen\nexit 0\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  for (int i = 0; i < 2; ++i) tessera::testing::run_tessera("launch --mpirun " + fake + " -n 2 -- compatibility");
  std::ifstream seen(dir + "/seen");
  std::vector<std::string> bases;
  for (std::string line; std::getline(seen, line);) bases.push_back(line);
  ASSERT_EQ(bases.size(), 2u);
  for (const std::string& base : bases) EXPECT_NE(base.find("tessera-launch-"), std::string::npos) << base;
  EXPECT_NE(bases[0], bases[1]);
  std::filesystem::remove_all(dir);
}

// A host name that does not resolve is named before mpirun starts anything (mpirun would start the
// other hosts' daemons first, then print screens about routes). A stand-in for mpirun records
// whether it was called; names under .invalid never resolve (RFC 6761).
TEST(LaunchCommand, AHostThatDoesNotResolveIsNamedBeforeMpirunStarts) {
  const std::string dir = ::testing::TempDir() + "tessera_launch_resolve_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string fake = dir + "/mpirun";
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\ntouch " << dir << "/called\nexit 0\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  const tessera::testing::CliResult r = tessera::testing::run_tessera(
      "launch --mpirun " + fake + " -n 2 --hosts localhost:1,node7.invalid:1 -- train --config run.toml");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("error: launch: host 'node7.invalid' of --hosts does not resolve"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("add it to /etc/hosts or DNS"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/called")) << "mpirun was started";
  std::filesystem::remove_all(dir);
}
