// tessera launch -n N [--hosts h1,h2 | --hostfile F] [--launch-agent CMD] [--network NET] [--dry-run] -- <tessera command and args>
//
// Runs this tessera executable on N ranks through mpirun, with the settings that make it work
// out of the box (see dist/launch.h): no core binding, oversubscription when ranks exceed cores,
// OMP_NUM_THREADS = cores / ranks per node, the root flag in containers. The ranks learn their
// rank and size from MPI, so plain `mpirun` and Slurm's `srun --mpi=pmix` work as well.
//
// The launcher stays while the job runs: it hands a Ctrl-C or SIGTERM on to every rank as one stop
// request, and on one machine it exits with the job's own code (3 for a stop with a checkpoint)
// and says each rank's different message once, without mpirun's abort text (dist/job_status.h).
#include <fmt/format.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/this_tessera.h"
#include "cli/errors.h"
#include "config/toml_reader.h"
#include "core/check.h"
#include "dist/job_status.h"
#include "dist/launch.h"

namespace tessera::cli {

namespace {

// Signals the launcher takes while mpirun runs. mpirun turns SIGINT and SIGTERM into an abort
// of the job (SIGTERM to the ranks, SIGKILL one second later: no time for a checkpoint), while it
// forwards SIGUSR1, SIGUSR2 and SIGTSTP/SIGCONT to every rank and lets the job go on. So mpirun
// runs in a process group of its own, out of reach of the terminal's Ctrl-C, and the launcher
// hands a stop request to a training job as SIGUSR1, which its ranks take as a stop
// (core/stop_signals.h) — once every rank has said it takes them, since before that SIGUSR1 would
// end a rank. Any other command's job gets the signal itself, and mpirun ends it. SIGHUP (the
// terminal closed) is a stop request like the others.
sigset_t launcher_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGTSTP, SIGCONT}) sigaddset(&set, s);
  return set;
}

struct StopForwarding {
  bool training = false;
  const dist::JobStatus* status = nullptr;  // where the ranks say they take stop requests; null: none
  int ranks = 0;

  bool ranks_take_stops() const {
    return status == nullptr || status->ranks_without(dist::JobStatus::Mark::TakesStopRequests, ranks).empty();
  }
};

// This process's environment with `extra` ("NAME=value" entries) set over it.
std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& x) {
      return entry.substr(0, entry.find('=') + 1) == std::string_view(x).substr(0, x.find('=') + 1);
    });
    if (!replaced) out.emplace_back(entry);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

// Starts `command` in a process group of its own, its input from /dev/null (a process outside the
// terminal's foreground group that reads the terminal is stopped), with `environment` set over
// this process's, and waits for it while handing on the signals above. Returns its exit status as
// a shell would give it.
int run_and_wait(const std::vector<std::string>& command, const std::vector<std::string>& environment,
                 const StopForwarding& stops) {
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Made before the fork: the child only executes.
  const std::vector<std::string> env_strings = environment_with(environment);
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const sigset_t set = launcher_signals();
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &set, &before);
  const pid_t launcher = ::getpid();
  const pid_t child = ::fork();
  TS_CHECK(child >= 0, "launch: cannot start a process: {}", std::strerror(errno));
  if (child == 0) {
    ::setpgid(0, 0);
    // A launcher that dies without handing anything on (SIGKILL, a crash) takes the job with it:
    // mpirun, told by SIGTERM, ends its ranks. Without this they would train on as orphans, holding
    // the run folder's lock against the requeued job.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(kExitError);  // it died before the line above
    // A Ctrl-C that reached the launcher's group before the line above is pending here too, blocked:
    // unblocked, it would end the child before mpirun starts. The launcher has it as well and hands
    // it on as a stop, so the child's copy is dropped (ignoring a pending signal discards it), and
    // the default action put back for mpirun.
    for (int s = 1; s < NSIG; ++s) {
      if (sigismember(&set, s) != 1) continue;
      ::signal(s, SIG_IGN);
      ::signal(s, SIG_DFL);
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (const int null = ::open("/dev/null", O_RDONLY); null >= 0) ::dup2(null, STDIN_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    std::fprintf(stderr,
                 "error: could not start '%s': %s. Install OpenMPI (openmpi-bin; scripts/install-deps.sh does) or "
                 "name mpirun with --mpirun\n",
                 argv[0], std::strerror(errno));
    ::_exit(kExitError);
  }
  ::setpgid(child, child);  // also here, so no signal can come before the child is in its group
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::seconds kRepeat{3};  // a group's several deliveries of one Ctrl-C: one request
  std::optional<Clock::time_point> last_request;
  bool request_waiting = false;  // a request that came before every rank took them
  const timespec poll{0, 100'000'000};
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG | WUNTRACED);
    if (done == child && (WIFEXITED(status) || WIFSIGNALED(status))) break;
    const int sig = ::sigtimedwait(&set, nullptr, &poll);
    if (sig == SIGTSTP) {
      ::kill(child, SIGTSTP);
      ::raise(SIGSTOP);  // the launcher stops with its job; SIGCONT wakes both
    } else if (sig == SIGCONT) {
      ::kill(child, SIGCONT);
    } else if (sig > 0) {
      const Clock::time_point now = Clock::now();
      if (!last_request || now - *last_request > kRepeat) {
        last_request = now;
        if (stops.training) {
          request_waiting = true;
        } else {
          ::kill(child, sig);
        }
      }
    }
    if (request_waiting && stops.ranks_take_stops()) {
      request_waiting = false;
      ::kill(child, SIGUSR1);
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A folder for the ranks' outcomes (dist/job_status.h), removed when the launch ends.
class StatusFolder {
 public:
  StatusFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = (std::filesystem::path(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") / "tessera-launch-XXXXXX").string();
    TS_CHECK(::mkdtemp(pattern.data()) != nullptr, "launch: cannot make a folder for the ranks' outcomes ({}): {}",
             pattern, std::strerror(errno));
    path_ = pattern;
  }
  ~StatusFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  StatusFolder(const StatusFolder&) = delete;
  StatusFolder& operator=(const StatusFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

// mpirun and its launch agent reach every host by its name: one that does not resolve here would
// fail only after mpirun has started the daemons of the others, with a screenful about routes and
// daemons. Checked first, naming the host.
void check_hosts_resolve(const std::vector<std::string>& names, const std::string& where) {
  for (const std::string& name : names) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    addrinfo* found = nullptr;
    const int error = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
    if (found != nullptr) ::freeaddrinfo(found);
    TS_CHECK(error == 0,
             "launch: host '{}' of {} does not resolve ({}); check its spelling, or add it to /etc/hosts or DNS on "
             "this machine (mpirun reaches every host by its name)",
             name, where, ::gai_strerror(error));
  }
}

// A launch agent given as a path ("./agent.sh --flag") is made absolute, since mpirun runs it from
// wherever it is; a bare command name ("rsh") is left for PATH.
std::string resolve_agent(const std::string& agent) {
  const std::string program = agent.substr(0, agent.find(' '));
  if (program.find('/') == std::string::npos) return agent;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(program, ec);
  TS_CHECK(!ec && ::access(absolute.c_str(), X_OK) == 0,
           "launch: --launch-agent '{}' is not an executable file; give the path of a program that mpirun calls as "
           "'agent HOST COMMAND' (such as scripts/cluster-agent.sh), or a command on PATH such as rsh",
           program);
  return absolute.string() + agent.substr(program.size());
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
  cmd->add_option("--launch-agent", opts->request.launch_agent,
                  "how mpirun starts its daemons on the other hosts instead of ssh: a command called as 'agent HOST "
                  "COMMAND' (OpenMPI's plm_rsh_agent), such as rsh or scripts/cluster-agent.sh");
  cmd->add_option("--network", opts->request.network,
                  "the network between hosts, an interface (eth0) or subnet (10.0.0.0/24): the ranks' and daemons' "
                  "TCP traffic stays on it (btl_tcp_if_include, oob_tcp_if_include)");
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
    if (!opts->request.launch_agent.empty()) opts->request.launch_agent = resolve_agent(opts->request.launch_agent);
    std::istringstream words(opts->mpi_args);
    for (std::string w; words >> w;) opts->request.mpirun_args.push_back(w);
    opts->request.executable = this_executable();
    const dist::MachineInfo machine = dist::this_machine(opts->request);
    if (opts->dry_run) {
      fmt::print("{}\n", dist::shell_line(dist::mpirun_command(opts->request, machine)));
      return;
    }
    // Not in a dry run, which may well be written on a machine that does not know the hosts.
    std::vector<std::string> host_names;
    for (const std::string& entry : opts->request.hosts) host_names.push_back(dist::parse_host(entry).name);
    check_hosts_resolve(host_names, "--hosts");
    check_hosts_resolve(machine.hostfile_names, "hostfile '" + opts->request.hostfile + "'");
    fmt::print(stderr, "tessera launch: {}\n", dist::shell_line(dist::mpirun_command(opts->request, machine)));
    // On one machine the ranks leave their outcomes for the launcher. Across machines the folder
    // would have to be on a file system every host shares, so there the ranks exit with their own
    // codes and mpirun reports them.
    std::optional<StatusFolder> folder;
    std::optional<dist::JobStatus> status;
    std::vector<std::string> environment;
    if (opts->request.hosts.empty() && opts->request.hostfile.empty()) {
      folder.emplace();
      opts->request.job_status_dir = folder->path();
      status.emplace(folder->path(), -1);
      // Open MPI 4 keeps a job's session files under <TMPDIR>/ompi.<host>.<uid>, which every job
      // of the user on the machine shares and the last to finish removes: two jobs that start at
      // the same moment can both find it missing, and the second one's mkdir fails the job
      // ("orte_session_dir failed"). Under the job's own folder no other job meets it. Through the
      // environment, where an Open MPI that does not know the variable ignores it.
      environment.push_back("OMPI_MCA_orte_tmpdir_base=" + folder->path());
    }
    const bool training = !opts->request.args.empty() && opts->request.args.front() == "train";
    const int mpirun_code = run_and_wait(dist::mpirun_command(opts->request, machine), environment,
                                         {training, status ? &*status : nullptr, opts->request.ranks});
    int code = mpirun_code;
    if (status) {
      const std::vector<dist::RankOutcome> outcomes = status->outcomes();
      for (const std::string& line : dist::messages_to_repeat(outcomes)) fmt::print(stderr, "{}\n", line);
      if (mpirun_code == 0) code = dist::job_exit_code(outcomes);
      // A rank killed outright (SIGKILL, the kernel's out-of-memory killer) says nothing, and
      // mpirun ends the others at once: a stop they announced on its SIGTERM never saved.
      std::vector<int> silent;
      for (int r = 0; r < opts->request.ranks; ++r) {
        if (std::none_of(outcomes.begin(), outcomes.end(), [&](const dist::RankOutcome& o) { return o.rank == r; })) {
          silent.push_back(r);
        }
      }
      if (mpirun_code != 0 && !silent.empty()) {
        fmt::print(stderr,
                   "tessera launch: the job ended with code {} before rank{} {} said how {} ended: a rank was killed "
                   "(mpirun names it above) and mpirun ended the rest, so no checkpoint a stop announced was "
                   "written{}\n",
                   mpirun_code, silent.size() == 1 ? "" : "s", dist::describe_ranks(silent),
                   silent.size() == 1 ? "it" : "they",
                   training ? "; --checkpoint.resume latest continues from the last complete one" : "");
      }
    }
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace tessera::cli
