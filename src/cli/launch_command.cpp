// tessera launch -n N [--hosts h1,h2 | --hostfile F] [--dry-run] -- <tessera command and args>
//
// Runs this tessera executable on N ranks through mpirun, with the settings that make it work
// out of the box (see dist/launch.h): no core binding, oversubscription when ranks exceed cores,
// OMP_NUM_THREADS = cores / ranks per node, the root flag in containers. The ranks learn their
// rank and size from MPI, so plain `mpirun` and Slurm's `srun --mpi=pmix` work as well.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/check.h"
#include "dist/launch.h"

namespace tessera::cli {

namespace {

std::string this_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  TS_CHECK(!ec, "cannot find the running tessera executable through /proc/self/exe: {}", ec.message());
  return path.string();
}

[[noreturn]] void run(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp(argv[0], argv.data());
  TS_FAIL("could not start '{}': {}. Install OpenMPI (openmpi-bin; scripts/install-deps.sh does) or name mpirun "
          "with --mpirun",
          command[0], std::strerror(errno));
}

}  // namespace

void add_launch_command(CLI::App& app) {
  struct Options {
    dist::LaunchRequest request;
    std::string mpi_args;
    bool dry_run = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a tessera command on N ranks with mpirun: tessera launch -n 4 -- train --config run.toml");
  cmd->add_option("-n,--ranks", opts->request.ranks, "number of ranks (processes)")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--hosts", opts->request.hosts, "hosts to run on, comma-separated, each 'name' or 'name:slots'")
      ->delimiter(',');
  cmd->add_option("--hostfile", opts->request.hostfile, "mpirun hostfile (one 'name slots=K' per line)")
      ->check(CLI::ExistingFile)
      ->excludes("--hosts");
  cmd->add_option("--threads", opts->request.threads_per_rank, "OpenMP threads per rank (default: cores / ranks per node)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--mpirun", opts->request.mpirun, "the mpirun program")->capture_default_str();
  cmd->add_option("--mpi-args", opts->mpi_args, "extra mpirun arguments, space-separated (e.g. \"--mca btl_tcp_if_include eth0\")");
  cmd->add_flag("--dry-run", opts->dry_run, "print the mpirun command and exit");
  // After "--" every word belongs to the command, so its own options need no quoting.
  cmd->add_option("command", opts->request.args, "the tessera command to run and its arguments, after --")->required();
  cmd->footer("Put the tessera command after \"--\": tessera launch -n 2 -- train --config run.toml");
  cmd->callback([opts] {
    std::istringstream words(opts->mpi_args);
    for (std::string w; words >> w;) opts->request.mpirun_args.push_back(w);
    opts->request.executable = this_executable();
    const std::vector<std::string> command = dist::mpirun_command(opts->request, dist::this_machine(opts->request));
    if (opts->dry_run) {
      fmt::print("{}\n", dist::shell_line(command));
      return;
    }
    fmt::print(stderr, "tessera launch: {}\n", dist::shell_line(command));
    run(command);
  });
}

}  // namespace tessera::cli
