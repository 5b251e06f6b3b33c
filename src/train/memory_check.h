#pragma once
// Before a run allocates anything, its peak memory per process — model states by ZeRO stage,
// activations by the recompute plan, buffers — is predicted from the config alone and compared
// with the memory the machine has available, so an impossible run (a million-sequence batch, a
// model of 100,000 layers) is refused at once with the numbers and the keys to shrink, instead of
// being killed by the kernel a minute later.
#include <cstdint>
#include <string>

#include "train/run_config.h"

namespace tessera::train {

struct MemoryEstimate {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return params + grads + optimizer + activations + buffers; }
  std::string describe() const;  // "parameters 14.2 MiB, gradients ..., buffers ..."
};

// Bytes in the unit that reads best: MiB below a GiB (a small model's parts are not "0.00 GiB"),
// GiB from there.
std::string readable_bytes(double bytes);

// One process's peak, for `config` (its model's vocab_size resolved).
MemoryEstimate estimate_run_memory(const RunConfig& config);

// Bytes the operating system can still give (MemAvailable of /proc/meminfo); 0 when unknown.
double available_memory_bytes();

// What a process of the run needs: `tessera plan --config`'s memory peak (train/planned_run.h)
// where the planner describes the run, else the bound above; with the start line that says which,
// and what the nvme tier holds at most when something is offloaded.
struct RunMemory {
  double per_process = 0;   // the compute tier's memory peak, every tag at once
  double nvme = 0;          // the nvme tier's peak (0: nothing offloaded)
  std::string description;  // what makes it up, for an error that says it does not fit
  std::string start_line;
};
RunMemory run_memory_of(const RunConfig& config);

// RAM the nvme tier's staging buffers take (memory/nvme_store.h) when the run offloads anything.
double staging_bytes(const RunConfig& config);

// Refuses, before anything is allocated, a run whose processes on this machine need more than it
// has available (`available_bytes`), or whose process needs more than memory.ram_budget_mb: its
// memory peak, what the process held before the model (`baseline_bytes`: libraries, data) and the
// staging buffers. The message names the settings that would fit. An offload folder on a disk with
// less room than the nvme tier's peak needs is refused naming both.
void check_memory_fits(const RunConfig& config, const RunMemory& memory, int processes_here, double available_bytes,
                       double baseline_bytes);

}  // namespace tessera::train
