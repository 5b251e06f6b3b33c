// tessera launch -n N [--hosts h1,h2 | --hostfile F] [--dry-run] -- <tessera command and args>
//
// Runs this tessera executable on N ranks through mpirun, with the settings that make it work
// out of the box (see dist/launch.h): no core binding, oversubscription when ranks exceed cores,
// OMP_NUM_THREADS = cores / ranks per node, the root flag in containers. The ranks learn their
// rank and size from MPI, so plain `mpirun` and Slurm's `srun --mpi=pmix` work as well.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/toml_reader.h"
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

// The words after "--" must start a tessera command (each rank runs this tessera with them): a
// misspelt command, or the program's own name in front of it, is caught here once rather than by
// every rank after mpirun has started them all.
void check_command(const CLI::App& app, const std::vector<std::string>& args) {
  TS_CHECK(!args.empty(), "launch: give the tessera command to run after \"--\", such as: tessera launch -n 2 -- train "
           "--config run.toml");
  const std::string& first = args.front();
  TS_CHECK(first != "tessera" && !first.ends_with("/tessera"),
           "launch: the words after \"--\" are a tessera command without the program's name (launch runs this "
           "tessera itself); drop '{}': tessera launch -n 2 -- {}",
           first, args.size() > 1 ? args[1] : std::string("train --config run.toml"));
  if (first.starts_with("-")) return;  // --version, --help, --debug
  std::vector<std::string> names;
  for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(c->get_name());
  if (std::find(names.begin(), names.end(), first) != names.end()) return;
  const std::string hint = config::closest_match(first, names);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  TS_FAIL("launch: unknown command '{}' after \"--\"; {}commands: {}", first,
          hint.empty() ? std::string() : fmt::format("did you mean '{}'? ", hint), list);
}

}  // namespace

void add_launch_command(CLI::App& app) {
  struct Options {
    dist::LaunchRequest request;
    std::string hosts;
    std::string mpi_args;
    bool dry_run = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a tessera command on N ranks with mpirun: tessera launch -n 4 -- train --config run.toml");
  // Ranges are checked in the callback (and by dist::mpirun_command) with messages that say what a
  // value means; CLI11's own range check prints its bounds as 309-digit numbers.
  cmd->add_option("-n,--ranks", opts->request.ranks, "number of ranks (processes), at least 1")->required();
  // One word, split at commas here: an option that takes several words would also swallow the
  // "--" that starts the command (CLI11 ends such a list at "--" and eats it).
  auto* hosts = cmd->add_option("--hosts", opts->hosts,
                                "hosts to run on, comma-separated, each 'name' (1 slot) or 'name:slots', e.g. "
                                "node1:8,node2:8");
  cmd->add_option("--hostfile", opts->request.hostfile, "mpirun hostfile (one 'name slots=K' per line)")
      ->check(CLI::ExistingFile)
      ->excludes(hosts);
  auto* threads = cmd->add_option("--threads", opts->request.threads_per_rank,
                                  "OpenMP threads per rank, at least 1 (default: cores / ranks per node)");
  cmd->add_option("--mpirun", opts->request.mpirun, "the mpirun program")->capture_default_str();
  cmd->add_option("--mpi-args", opts->mpi_args, "extra mpirun arguments, space-separated (e.g. \"--mca btl_tcp_if_include eth0\")");
  cmd->add_flag("--dry-run", opts->dry_run, "print the mpirun command and exit");
  // After "--" every word belongs to the command, so its own options need no quoting.
  cmd->add_option("command", opts->request.args, "the tessera command to run and its arguments, after --");
  // Options of the command given without "--" land here, to be named in the error below.
  cmd->allow_extras();
  cmd->footer("Put the tessera command after \"--\": tessera launch -n 2 -- train --config run.toml");
  cmd->callback([opts, cmd, threads, &app] {
    std::vector<std::string> extras = cmd->remaining();
    std::erase(extras, "--");  // CLI11 keeps the separator among the words it did not place
    TS_CHECK(extras.empty(),
             "launch: '{}' is not an option of launch; put the tessera command and its options after \"--\", such as: "
             "tessera launch -n 2 -- train --config run.toml",
             extras.empty() ? std::string() : extras.front());
    TS_CHECK(opts->request.ranks >= 1, "-n must be at least 1 (the number of processes to start), got {}",
             opts->request.ranks);
    TS_CHECK(threads->count() == 0 || opts->request.threads_per_rank >= 1,
             "--threads must be at least 1, got {}; leave it out for cores / ranks per node",
             opts->request.threads_per_rank);
    if (!opts->hosts.empty()) {
      for (const dist::Host& h : dist::parse_hosts(opts->hosts)) {
        opts->request.hosts.push_back(h.slots > 0 ? fmt::format("{}:{}", h.name, h.slots) : h.name);
      }
    }
    check_command(app, opts->request.args);
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
