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
//     --calibrate-links FILE`, whose ranks ping-pong messages of 8 B to 16 MiB and all-reduce them;
//   - the engine's training step on a reference model with each thread count, as a data-parallel
//     run of cores / threads ranks (`tessera launch -n R -- plan --calibrate-step FILE`; one process
//     where it takes every core), against what the kernels above predict for it: the step efficiency;
//   - memory: the machine's total, less what is in use by others now (reserved);
//   - the disk's write and read bandwidth through the nvme tier's store in the offload folder
//     (calibrate_disk.h), a few seconds.
// Every kernel and link measurement is the best of repeated runs (the least disturbed by other
// work), the step the median of its steps; it prints each as it goes and takes about a minute.
#include <string>

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
// and all-reduce seconds by message size; with `busy`, on any even number, the latency of a
// collective between busy processes. Rank 0 writes them to `out` as JSON.
void measure_links(const std::string& out, bool busy);

}  // namespace tessera::cli
