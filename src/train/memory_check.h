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

// Throws when `per_process` bytes (made up as `description` says) × `processes_here` exceed what is
// available.
void check_memory_fits(const RunConfig& config, double per_process, const std::string& description,
                       int processes_here, double available_bytes);

}  // namespace tessera::train
