// `tessera plan --calibrate-here --hosts ...`: the network between two nodes as the cluster file's
// inter-node link (calibrate_here.h).
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/this_tessera.h"
#include "cli/calibrate_here.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "dist/launch.h"
#include "plan/cluster.h"

namespace tessera::cli {

namespace {

// The bandwidth is fitted to the largest messages (16 MiB), the size of the gradient buckets that
// carry most of a step's traffic (parallel.bucket_mb, 25 MiB by default). Smaller messages pass a
// shaped link's token bucket at more than its rate, and the all-reduces measured from 2 MiB down
// took as little as one one-way message where the 16 MiB ones took two.
constexpr double kFitFromBytes = 16 << 20;

// Runs this tessera with `args` and returns what it printed on its standard output (its standard
// error goes to ours); fails naming `what` when it does not exit with 0.
std::string output_of(const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> words = this_tessera_with(args);
  std::vector<char*> argv;
  for (std::string& a : words) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_ends[2];
  TS_CHECK(::pipe(pipe_ends) == 0, "plan --calibrate-here: cannot make a pipe: {}", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  TS_CHECK(pid >= 0, "plan --calibrate-here: could not start {} (fork failed)", what);
  if (pid == 0) {
    ::dup2(pipe_ends[1], STDOUT_FILENO);
    ::close(pipe_ends[0]);
    ::close(pipe_ends[1]);
    ::execv(words.front().c_str(), argv.data());
    ::_exit(127);
  }
  ::close(pipe_ends[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_ends[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  TS_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "plan --calibrate-here: {} failed; run it alone to see why",
           what);
  return output;
}

// The JSON line rank 0 printed among the job's output.
nlohmann::json links_line(const std::string& output, const std::string& what) {
  const std::string prefix(kLinksLinePrefix);
  for (size_t at = output.find(prefix); at != std::string::npos; at = output.find(prefix, at + 1)) {
    if (at != 0 && output[at - 1] != '\n') continue;
    const size_t end = output.find('\n', at);
    return nlohmann::json::parse(output.substr(at + prefix.size(), end == std::string::npos ? end : end - at - prefix.size()));
  }
  TS_FAIL("plan --calibrate-here: {} printed no measurement; its output was:\n{}", what, output);
}

// The one-way bandwidth of messages of `fit_from_bytes` and more: the least-squares fit in log time
// of latency + S / w, the latency the smallest message's.
double fit_one_way(const std::vector<double>& sizes, const std::vector<double>& seconds, double fit_from_bytes) {
  const double a = seconds.front();
  auto error = [&](double w) {
    double sum = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] >= fit_from_bytes) sum += std::pow(std::log((a + sizes[i] / w) / seconds[i]), 2);
    }
    return sum;
  };
  const double w0 = sizes.back() / seconds.back();
  double best_w = w0, best = error(w0);
  for (int j = -100; j <= 500; ++j) {
    if (const double w = w0 * std::pow(1.01, j), e = error(w); e < best) {
      best = e;
      best_w = w;
    }
  }
  return best_w;
}

// One of `nodes` nodes that are network namespaces of one machine: its share of the machine (its
// cores, peak, memory and memory bandwidth divided among the nodes, at least one core each).
void split_machine(plan::ClusterSpec& c, int64_t nodes) {
  const double n = static_cast<double>(nodes);
  double compute_share = 1 / n;
  if (c.host.cores > 0) {
    const int cores = std::max(1, c.host.cores / static_cast<int>(nodes));
    compute_share = static_cast<double>(cores) / c.host.cores;
    c.host.cores = cores;
    std::erase_if(c.host.processes, [&](const plan::ProcessSpec& p) { return p.threads > cores; });
  }
  c.device.peak_flops_fp32 *= compute_share;
  c.device.peak_flops_bf16 *= compute_share;
  c.device.memory_bytes /= n;
  c.device.reserved_bytes /= n;
  c.device.memory_bandwidth /= n;
}

}  // namespace

void calibrate_nodes(const std::string& out, const std::string& hosts, const std::string& launch_agent,
                     const std::string& network) {
  std::error_code ec;
  TS_CHECK(std::filesystem::is_regular_file(out, ec),
           "plan --calibrate-here --hosts writes the link between nodes into the cluster file of one node, and '{}' "
           "does not exist; measure a node first (tessera plan --calibrate-here --out {}, on one of the hosts), then "
           "run this again", out, out);
  plan::ClusterSpec c = plan::load_cluster(out);
  const std::vector<dist::Host> parsed = dist::parse_hosts(hosts);
  TS_CHECK(parsed.size() >= 2, "plan --calibrate-here --hosts '{}': give two hosts or more (the link is measured "
           "between the first two), such as node1:1,node2:1", hosts);
  const int slots = parsed.front().slots > 0 ? parsed.front().slots : 1;
  for (const dist::Host& h : parsed) {
    TS_CHECK((h.slots > 0 ? h.slots : 1) == slots, "plan --calibrate-here --hosts '{}': every host needs as many slots "
             "(the cluster file has one devices_per_node); '{}' has {}, '{}' {}", hosts, parsed.front().name, slots,
             h.name, h.slots > 0 ? h.slots : 1);
  }
  // One rank on each of the first two hosts, so that every message crosses the network.
  std::vector<std::string> command = {"launch", "-n", "2", "--hosts",
                                      fmt::format("{}:1,{}:1", parsed[0].name, parsed[1].name)};
  if (!launch_agent.empty()) command.insert(command.end(), {"--launch-agent", launch_agent});
  if (!network.empty()) command.insert(command.end(), {"--network", network});
  command.insert(command.end(), {"--", "plan", "--calibrate-links", std::string(kLinksToOutput)});
  std::string shown = "tessera";
  for (const std::string& w : command) shown += " " + w;
  fmt::print("measuring the link between {} and {}: {}\n", parsed[0].name, parsed[1].name, shown);
  const nlohmann::json links = links_line(output_of(command, "`" + shown + "`"), "`" + shown + "`");
  const std::vector<double> sizes = links["bytes"], one_way_seconds = links["one_way_seconds"],
                            reduce = links["all_reduce_seconds"];
  const auto [latency, bandwidth] = fit_all_reduce(sizes, reduce, kFitFromBytes);
  const double one_way = fit_one_way(sizes, one_way_seconds, kFitFromBytes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    fmt::print("  {:>9} B: all-reduce {:10.1f} us (ring model {:10.1f}); one way {:10.1f} us (model {:10.1f})\n",
               sizes[i], reduce[i] * 1e6, (2 * latency + sizes[i] / bandwidth) * 1e6, one_way_seconds[i] * 1e6,
               (one_way_seconds.front() + sizes[i] / one_way) * 1e6);
  }
  // The runtime's all-reduce (MPI's in place) reduces to one rank and broadcasts back: on two ranks
  // the message crosses the link once each way, one after the other (measured: twice a one-way
  // message's time), where the ring model has both at once. The link is written as the all-reduces
  // fit it, as the intra-node link is, so that the model's all-reduce takes what the runtime's
  // does; its one-way rate is printed and noted beside it.
  fmt::print("inter-node link: latency {:.1f} us, bandwidth {:.4g} GB/s ({:.4g} Gbit/s; fitted to the all-reduces of "
             "{} MiB and more); one way {:.4g} Gbit/s\n", latency * 1e6, bandwidth / 1e9, 8 * bandwidth / 1e9,
             kFitFromBytes / (1 << 20), 8 * one_way / 1e9);
  // The cost model multiplies every link's bandwidth by efficiency.link; the measured figure is
  // what the link achieved already, so it is stored undone by that factor.
  c.inter_node = {bandwidth / c.efficiency.link, latency};
  if (links.contains("busy_all_reduce_seconds")) {
    // The same ring model fitted to the all-reduce that crossed while both nodes computed.
    const double busy_bytes = links.value("busy_bytes", 0.0), busy_seconds = links["busy_all_reduce_seconds"];
    const double busy = std::min(bandwidth, busy_bytes / std::max(busy_seconds - 2 * latency, 1e-9));
    const double slowdown = std::clamp(links.value("compute_slowdown", 1.0), 1.0, 100.0);
    c.inter_node.busy_bandwidth = busy / c.efficiency.link;
    c.inter_node.compute_slowdown = slowdown;
    fmt::print("while both nodes compute: the link carries {:.4g} Gbit/s ({:.0f} MiB all-reduced in {:.3f} s), and "
               "their products take {:.2f} times as long as alone\n",
               8 * busy / 1e9, busy_bytes / (1 << 20), busy_seconds, slowdown);
  }
  c.devices_per_node = slots;
  c.max_nodes = static_cast<int64_t>(parsed.size());
  const bool shared = links.value("same_machine", false);
  if (shared) split_machine(c, c.max_nodes);
  c.validate();
  write_file_atomically(
      out, fmt::format("# A cluster as the cost model sees it (docs/planner.md), written by `tessera plan "
                       "--calibrate-here`: a node measured alone, and the link between nodes measured by `--calibrate-here "
                       "--hosts {}`.\n# The link between nodes as the all-reduces fit it (the cost model's ring); one way "
                       "it carried {:.4g} Gbit/s.\n{}{}",
                       hosts, 8 * one_way / 1e9,
                       shared ? "# The hosts are one machine (the same kernel: network namespaces of a test cluster), so "
                                "each node is written as its share of the machine's cores and memory.\n"
                              : "",
                       plan::cluster_toml(c)));
  fmt::print("wrote {}: {} nodes of {} device{}, the inter-node link as measured{}; the intra-node link stays\n", out,
             c.max_nodes, slots, slots == 1 ? "" : "s",
             shared ? fmt::format(", each node {} of this machine (the hosts share its kernel)",
                                  c.host.cores > 0 ? fmt::format("{} core{}", c.host.cores, c.host.cores == 1 ? "" : "s")
                                                   : fmt::format("1/{}", c.max_nodes))
                    : std::string());
}

}  // namespace tessera::cli
