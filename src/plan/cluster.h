#pragma once
// A cluster as the cost model sees it: one kind of device, how many sit in a node, the two kinds of
// link (inside a node, across nodes), and the few efficiency constants that turn peak numbers into
// achievable ones. Read from a `[cluster]` TOML table; shipped examples live in configs/clusters/.
#include <algorithm>
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
  // While the nodes compute: the bandwidth the link carries (0: `bandwidth`) and how much longer
  // the nodes' compute takes while it carries traffic (1: no longer). Where the transport's work
  // (TCP's copies, checksums, a shaped queue) runs on the cores that compute, a transfer hidden
  // behind backward slows both; `plan --calibrate-here --hosts` measures them (docs/planner.md).
  double busy_bandwidth = 0;
  double compute_slowdown = 1;
};

// An efficiency that depends on the size of the work, measured on the device: points (FLOPs of
// one call, achieved fraction of peak), read between them linearly in log FLOPs and held at the
// end points beyond them.
struct EfficiencyCurve {
  std::vector<double> flops;       // ascending
  std::vector<double> efficiency;  // fractions in (0, 1], one per point
  bool empty() const { return flops.empty(); }
  double at(double flops) const;
  bool operator==(const EfficiencyCurve&) const = default;
};

// What this engine's elementwise kernels cost on a device where they are bound by arithmetic
// rather than by bandwidth (a CPU: GeLU's exponential, the softmax over the vocabulary), measured:
// seconds per element, 0 where not measured (the bandwidth model then applies alone). A kernel
// takes the longer of these and its bytes over the bandwidth.
struct KernelCosts {
  double norm = 0, norm_backward = 0;              // per value normalized (LayerNorm; RMSNorm counted alike)
  double activation = 0, activation_backward = 0;  // per value of the MLP's activation (GeLU; SwiGLU alike)
  double residual = 0;                             // per value of a residual add, forward or backward
  double cross_entropy = 0;  // per logit: the loss and its gradient, which the engine computes together
  double optimizer = 0;      // per parameter of a step: gradient norm, clipping, AdamW, zeroing the gradient
  // Per gradient element of top-k compression's own work (parallel/compression/top_k.cpp): adding it
  // to the error feedback, the radix selection's three passes, and the reduced gradient rebuilt from
  // the gathered entries. Serial code, many times a stream of its bytes.
  double top_k = 0;
  bool operator==(const KernelCosts&) const = default;
};

// The efficiency model of a device. Each constant is a fraction or a time, explained in
// docs/planner.md; all of them apply to every layout and every model alike.
struct EfficiencySpec {
  double gemm = 0.7;               // achievable fraction of peak FLOP/s for large matrix multiplies
  double memory = 0.8;             // achievable fraction of memory bandwidth for streaming kernels
  double link = 0.8;               // achievable fraction of link bandwidth in ring collectives
  double kernel_overhead = 5e-6;   // seconds lost per kernel: launch, ramp-up and tail
  EfficiencyCurve gemm_curve;       // matrix multiplies by size; empty: `gemm` at every size
  EfficiencyCurve attention_curve;  // fused attention forwards by size; empty: `gemm`
  // Their backwards, by the size of the forward (FLOPs counted as kFlashBackwardFlops x the
  // forward's); empty: attention_curve read at the backward's FLOPs.
  EfficiencyCurve attention_backward_curve;
  KernelCosts kernels;
  bool operator==(const EfficiencySpec&) const = default;
};

// A CPU machine whose cores the processes of a run share: the device is the whole machine (its
// peak all cores together), and each of the run's ranks on a node gets cores / ranks OpenMP
// threads (at least one; more ranks than cores are time-sliced), as `tessera launch` starts them.
// What one process achieves depends on its thread count, measured for each (`tessera plan
// --calibrate-here`).
struct ProcessSpec {
  int threads = 1;
  double memory_bandwidth = 0;  // bytes/s one such process streams
  double kernel_overhead = 0;   // seconds of one kernel's fixed cost (waking its threads)
  EfficiencyCurve gemm;         // fractions of threads x the per-core peak
  EfficiencyCurve attention;    // likewise, for the fused attention kernel's forward
  EfficiencyCurve attention_backward;  // and its backward, by the forward's FLOPs
  KernelCosts kernels;                 // its elementwise kernels
  // The fraction of the kernel-by-kernel prediction a whole training step achieves (its kernels'
  // operands come from memory other work used; the step allocates, dispatches and keeps books
  // around them): every compute time is divided by it. Measured on a reference model.
  double step_efficiency = 1;
  bool operator==(const ProcessSpec&) const = default;
};
struct HostSpec {
  int cores = 0;                       // 0: devices are not processes sharing a machine
  std::vector<ProcessSpec> processes;  // by ascending threads; the first has 1
  // The latency of a collective between two busy processes when every core is shared by f of them
  // (f = 1: a core each): it waits for its partner to arrive, and with more processes than cores
  // for its partner to be scheduled. By ascending f >= 1, read linearly between the points and
  // held at the ends; empty: the link's own.
  std::vector<double> shared_factor;
  std::vector<double> shared_latency;  // seconds
  bool operator==(const HostSpec&) const = default;
};

// The node's local disk, where the nvme tier keeps its files (memory.offload_activations = "nvme"):
// the bandwidth of large transfers through the store, all of the node's processes together (they
// share it). 0 where not known: a plan that moves bytes to the tier then says it cannot time them.
struct DiskSpec {
  double read_bandwidth = 0;   // bytes/s
  double write_bandwidth = 0;  // bytes/s
  // bytes/s read and written together while reads and writes run at once (0: not measured; they
  // then take turns at their own rates)
  double mixed_bandwidth = 0;
  bool known() const { return read_bandwidth > 0 && write_bandwidth > 0; }
  bool operator==(const DiskSpec&) const = default;
};

struct ClusterSpec {
  std::string name;
  std::string description;
  DeviceSpec device;
  int devices_per_node = 1;  // 0 (host clusters only): as many processes as a run starts
  int64_t max_nodes = 0;  // 0: as many nodes as a plan asks for
  LinkSpec intra_node;    // e.g. NVLink through NVSwitch
  LinkSpec inter_node;    // e.g. one InfiniBand NIC per device
  EfficiencySpec efficiency;
  HostSpec host;          // a shared CPU machine; absent (cores 0) for accelerators
  DiskSpec disk;          // a node's, for the nvme tier; absent (0) when not known

  double peak_flops(Precision p) const { return p == Precision::Bf16 ? device.peak_flops_bf16 : device.peak_flops_fp32; }
  double usable_memory() const { return device.memory_bytes - device.reserved_bytes; }
  // 0 when unbounded.
  int64_t max_devices() const { return max_nodes * devices_per_node; }
  // Devices one node holds in a run of `devices`, and the most any node holds (unbounded: INT64_MAX).
  int64_t devices_on_a_node(int64_t devices) const { return devices_per_node == 0 ? devices : std::min<int64_t>(devices, devices_per_node); }
  int64_t node_capacity() const;
  void validate() const;
};

// Reads the `[cluster]` table (units as written in the TOML: TFLOP/s, GiB, GB/s, microseconds,
// GFLOP for the curves' points; the disk's `[cluster.disk]` read_gbps and write_gbps in GB/s).
ClusterSpec read_cluster_config(config::TableReader reader);
// The `[cluster]` TOML that read_cluster_config reads back as `c` (up to the rounding of its units).
std::string cluster_toml(const ClusterSpec& c);

// The cluster as one of `ranks` processes on one node of a host cluster sees it: threads t =
// max(1, cores / ranks); while they all compute, a time-slice share s = min(1, cores / (ranks t));
// peak t x the per-core peak x s with the efficiency curves measured at t threads (the nearest
// measured count at or below t), memory bandwidth the lesser of what one such process streams
// (x s) and the machine's share (device bandwidth / ranks), a kernel overhead and elementwise
// kernel costs stretched by 1/s, all compute slowed by the process's step_efficiency, and 1/ranks
// of the machine's memory. Links are as measured. A cluster without a host is returned unchanged.
ClusterSpec process_view(const ClusterSpec& c, int64_t ranks_on_node);
// The threads t and time-slice share s of process_view (1 thread and share 1 without a host).
struct ProcessShare {
  int64_t threads = 1;
  double share = 1;
};
ProcessShare process_share(const ClusterSpec& c, int64_t ranks_on_node);

// `name_or_path` is a TOML file or a shipped name such as "a100-80gb" (see config_files.h).
ClusterSpec load_cluster(const std::string& name_or_path, const std::vector<std::string>& dirs = default_config_dirs());

std::string precision_name(Precision p);

}  // namespace tessera::plan
