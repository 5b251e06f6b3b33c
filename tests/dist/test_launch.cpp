// The mpirun command `tessera launch` builds, for several machines, without running it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

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

  const std::string path = testing::TempDir() + "tessera_launch_hostfile";
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

TEST(Launch, BadRequestsAreRefusedWithAReason) {
  EXPECT_THROW(mpirun_command(LaunchRequest{.ranks = 0, .executable = "x"}, MachineInfo{}), Error);
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
