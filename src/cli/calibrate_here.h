#pragma once
// `tessera plan --calibrate-here`: this machine as a host cluster for the cost model
// (plan/cluster.h), from measurements taken here and now:
//   - sgemm (the BLAS the engine calls) at square sizes from 32 to 1536, and the engine's tiled
//     attention forward and backward at sequence lengths from 32 to 512, with 1 OpenMP thread and
//     with every core (and the powers of two between): each a curve of achieved fractions of
//     threads x the best single-core sgemm rate, the machine's peak being cores x that rate;
//   - the bandwidth one process streams (y = a x + y over arrays far larger than the caches) with
//     each thread count, and the fixed cost of a parallel kernel (an empty OpenMP loop);
//   - the latency and bandwidth of the runtime's own communicator between two processes on this
//     machine (shared memory): `plan --calibrate-here` starts `tessera launch -n 2 -- plan
//     --calibrate-links FILE`, whose ranks ping-pong messages of 8 B to 16 MiB and all-reduce them
//     (with --hosts, the same between two nodes: calibrate_nodes below);
//   - the engine's training step on a reference model with each thread count, as a data-parallel
//     run of cores / threads ranks (`tessera launch -n R -- plan --calibrate-step FILE`; one process
//     where it takes every core), against what the kernels above predict for it: the step efficiency;
//   - memory: the machine's total, less what is in use by others now (reserved);
//   - the disk's write and read bandwidth through the nvme tier's store in the offload folder
//     (calibrate_disk.h), a few seconds.
// Every kernel and link measurement is the best of repeated runs (the least disturbed by other
// work), the step the median of its steps; it prints each as it goes and takes about a minute.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::cli {

// Measures this machine and writes its cluster TOML to `out` (named `name`), the disk in
// `offload_dir` ("": the folder `out` goes to). Refuses an `out` or `offload_dir` it cannot use
// before it measures anything.
void calibrate_here(const std::string& out, const std::string& name, const std::string& offload_dir);

// One process's side of the step measurement: the reference step's seconds with `threads` threads,
// written to `out` as JSON ({"seconds"}). Started as ranks of `tessera launch`, a data-parallel step
// over them, rank 0 writing the mean of the ranks' medians.
void measure_step(const std::string& out, int threads);

// The ranks' side of the link measurements, run under `tessera launch`: on two ranks, the one-way
// and all-reduce seconds by message size and whether both ranks run on one machine
// ("same_machine"); with `busy`, on any even number, the latency of a collective between busy
// processes. Rank 0 writes them to `out` as JSON, or with `out` = kLinksToOutput prints them on
// its standard output as one line that starts with kLinksLinePrefix.
inline constexpr std::string_view kLinksToOutput = "-";
inline constexpr std::string_view kLinksLinePrefix = "tessera-links ";
void measure_links(const std::string& out, bool busy);

// The link's latency a and bandwidth w from two processes' all-reduces by message size, in the
// ring model's 2a + S/w (n = 2): a is half the all-reduce of the smallest message; w the
// least-squares fit in log time over the messages of `fit_from_bytes` and more.
std::pair<double, double> fit_all_reduce(const std::vector<double>& sizes, const std::vector<double>& seconds,
                                         double fit_from_bytes);

// `tessera plan --calibrate-here --hosts h1:1,h2:1`: the network between nodes, measured by two
// ranks on the first two hosts (`tessera launch --hosts ... -- plan --calibrate-links -`, through
// `launch_agent` and on `network` where given), written as the inter-node link of the cluster file
// `out`, which an earlier `--calibrate-here` on one node wrote; everything else in it stays, but
// for the node count (the hosts given) and devices per node (their slots). Where the hosts turn out
// to be one machine (network namespaces of a test cluster: the same kernel), each node is written
// as its share of the machine (cores, peak, memory and its bandwidth divided among the nodes).
void calibrate_nodes(const std::string& out, const std::string& hosts, const std::string& launch_agent,
                     const std::string& network);

}  // namespace tessera::cli
