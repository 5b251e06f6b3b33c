#pragma once
// A cluster as the cost model sees it: one kind of device, how many sit in a node, the two kinds of
// link (inside a node, across nodes), and the few efficiency constants that turn peak numbers into
// achievable ones. Read from a `[cluster]` TOML table; shipped examples live in configs/clusters/.
#include <cstdint>
#include <string>
#include <vector>

#include "config/toml_reader.h"
#include "plan/config_files.h"

namespace tessera::plan {

// Numeric formats a layout can train in. Bf16 means bf16 parameters, gradients and activations with
// fp32 master weights and fp32 Adam state (mixed precision); Fp32 means everything in fp32.
enum class Precision { Fp32, Bf16 };

struct DeviceSpec {
  std::string name;
  double peak_flops_fp32 = 0;   // FLOP/s of dense matrix multiply in fp32
  double peak_flops_bf16 = 0;   // FLOP/s of dense matrix multiply in bf16 (fp32 accumulate)
  double memory_bytes = 0;      // device memory
  double reserved_bytes = 0;    // held outside the allocator: runtime context, communicator, fragmentation
  double memory_bandwidth = 0;  // bytes/s
};

struct LinkSpec {
  double bandwidth = 0;  // bytes/s per device in one direction
  double latency = 0;    // seconds per message hop
};

// The efficiency model of a device. Each constant is a fraction or a time, explained in
// docs/planner.md; all of them apply to every layout and every model alike.
struct EfficiencySpec {
  double gemm = 0.7;               // achievable fraction of peak FLOP/s for large matrix multiplies
  double memory = 0.8;             // achievable fraction of memory bandwidth for streaming kernels
  double link = 0.8;               // achievable fraction of link bandwidth in ring collectives
  double kernel_overhead = 5e-6;   // seconds lost per kernel: launch, ramp-up and tail
};

struct ClusterSpec {
  std::string name;
  std::string description;
  DeviceSpec device;
  int devices_per_node = 1;
  int64_t max_nodes = 0;  // 0: as many nodes as a plan asks for
  LinkSpec intra_node;    // e.g. NVLink through NVSwitch
  LinkSpec inter_node;    // e.g. one InfiniBand NIC per device
  EfficiencySpec efficiency;

  double peak_flops(Precision p) const { return p == Precision::Bf16 ? device.peak_flops_bf16 : device.peak_flops_fp32; }
  double usable_memory() const { return device.memory_bytes - device.reserved_bytes; }
  // 0 when unbounded.
  int64_t max_devices() const { return max_nodes * devices_per_node; }
  void validate() const;
};

// Reads the `[cluster]` table (units as written in the TOML: TFLOP/s, GiB, GB/s, microseconds).
ClusterSpec read_cluster_config(config::TableReader reader);

// `name_or_path` is a TOML file or a shipped name such as "a100-80gb" (see config_files.h).
ClusterSpec load_cluster(const std::string& name_or_path, const std::vector<std::string>& dirs = default_config_dirs());

std::string precision_name(Precision p);

}  // namespace tessera::plan
