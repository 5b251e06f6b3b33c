#include "plan/cluster.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"

namespace tessera::plan {

namespace {
constexpr double kTera = 1e12;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kMicro = 1e-6;

constexpr double kGiga = 1e9;

// `<prefix>_gflop` and `<prefix>_efficiency`, both or neither.
EfficiencyCurve read_curve(config::TableReader& r, const std::string& prefix) {
  EfficiencyCurve curve;
  const std::vector<double> gflop = r.get<std::vector<double>>(prefix + "_gflop", {});
  curve.efficiency = r.get<std::vector<double>>(prefix + "_efficiency", {});
  for (double g : gflop) curve.flops.push_back(g * kGiga);
  TS_CHECK(curve.flops.size() == curve.efficiency.size(),
           "config: '{}' has {} points but '{}' {}; give one efficiency per size", r.dotted(prefix + "_gflop"),
           curve.flops.size(), r.dotted(prefix + "_efficiency"), curve.efficiency.size());
  return curve;
}

void check_curve(const EfficiencyCurve& c, const std::string& cluster, const std::string& what) {
  for (size_t i = 0; i < c.flops.size(); ++i) {
    TS_CHECK(c.flops[i] > 0 && (i == 0 || c.flops[i] > c.flops[i - 1]),
             "config: cluster '{}': the sizes of {} must be positive and ascending", cluster, what);
    TS_CHECK(c.efficiency[i] > 0 && c.efficiency[i] <= 1,
             "config: cluster '{}': {} = {} at {} GFLOP must be a fraction in (0, 1]", cluster, what, c.efficiency[i],
             c.flops[i] / kGiga);
  }
}

std::vector<double> in_gflop(const std::vector<double>& flops) {
  std::vector<double> out;
  for (double f : flops) out.push_back(f / kGiga);
  return out;
}

std::string curve_toml(const EfficiencyCurve& c, const std::string& prefix) {
  if (c.empty()) return "";
  return fmt::format("{}_gflop = [{}]\n{}_efficiency = [{}]\n", prefix, fmt::join(in_gflop(c.flops), ", "), prefix,
                     fmt::join(c.efficiency, ", "));
}

constexpr double kNano = 1e-9;

// The `<kernel>_ns` keys of a table: seconds per element of this engine's elementwise kernels.
struct KernelKey {
  const char* key;
  double KernelCosts::*cost;
};
constexpr KernelKey kKernelKeys[] = {{"norm_ns", &KernelCosts::norm},
                                     {"norm_backward_ns", &KernelCosts::norm_backward},
                                     {"activation_ns", &KernelCosts::activation},
                                     {"activation_backward_ns", &KernelCosts::activation_backward},
                                     {"residual_ns", &KernelCosts::residual},
                                     {"cross_entropy_ns", &KernelCosts::cross_entropy},
                                     {"optimizer_ns", &KernelCosts::optimizer},
                                     {"top_k_ns", &KernelCosts::top_k}};

KernelCosts read_kernels(config::TableReader& r) {
  KernelCosts k;
  for (const KernelKey& key : kKernelKeys) k.*key.cost = r.get<double>(key.key, 0.0) * kNano;
  return k;
}

void check_kernels(const KernelCosts& k, const std::string& cluster, const std::string& where) {
  for (const KernelKey& key : kKernelKeys) {
    TS_CHECK(k.*key.cost >= 0, "config: cluster '{}': {}.{} must be non-negative", cluster, where, key.key);
  }
}

std::string kernels_toml(const KernelCosts& k) {
  std::string out;
  for (const KernelKey& key : kKernelKeys) {
    if (k.*key.cost > 0) out += fmt::format("{} = {}\n", key.key, k.*key.cost / kNano);
  }
  return out;
}

LinkSpec read_link(config::TableReader r) {
  LinkSpec link;
  link.bandwidth = r.require<double>("bandwidth_gbps") * kGB;
  link.latency = r.require<double>("latency_us") * kMicro;
  link.busy_bandwidth = r.get<double>("busy_bandwidth_gbps", 0.0) * kGB;
  link.compute_slowdown = r.get<double>("compute_slowdown", 1.0);
  r.finish();
  return link;
}
}  // namespace

std::string precision_name(Precision p) { return p == Precision::Bf16 ? "bf16" : "fp32"; }

int64_t ClusterSpec::node_capacity() const {
  return devices_per_node == 0 ? std::numeric_limits<int64_t>::max() : devices_per_node;
}

double EfficiencyCurve::at(double f) const {
  TS_CHECK(!flops.empty() && flops.size() == efficiency.size(), "plan: an efficiency curve without points");
  if (f <= flops.front()) return efficiency.front();
  if (f >= flops.back()) return efficiency.back();
  const size_t i = static_cast<size_t>(std::upper_bound(flops.begin(), flops.end(), f) - flops.begin());
  const double x = (std::log(f) - std::log(flops[i - 1])) / (std::log(flops[i]) - std::log(flops[i - 1]));
  return efficiency[i - 1] + x * (efficiency[i] - efficiency[i - 1]);
}

void ClusterSpec::validate() const {
  TS_CHECK(!name.empty(), "config: cluster.name must not be empty");
  TS_CHECK(device.peak_flops_fp32 > 0 && device.peak_flops_bf16 > 0,
           "config: cluster '{}': cluster.device.peak_tflops_fp32 and peak_tflops_bf16 must be positive", name);
  TS_CHECK(device.memory_bytes > 0, "config: cluster '{}': cluster.device.memory_gib must be positive", name);
  TS_CHECK(device.reserved_bytes >= 0 && device.reserved_bytes < device.memory_bytes,
           "config: cluster '{}': cluster.device.reserved_gib must be in [0, memory_gib)", name);
  TS_CHECK(device.memory_bandwidth > 0, "config: cluster '{}': cluster.device.memory_bandwidth_gbps must be positive", name);
  TS_CHECK(devices_per_node >= 1 || (devices_per_node == 0 && host.cores > 0),
           "config: cluster '{}': cluster.devices_per_node must be at least 1 (0, any number of processes, only for a "
           "host cluster)", name);
  TS_CHECK(max_nodes >= 0, "config: cluster '{}': cluster.nodes must be 0 (unbounded) or positive", name);
  for (const LinkSpec* l : {&intra_node, &inter_node}) {
    TS_CHECK(l->bandwidth > 0 && l->latency >= 0,
             "config: cluster '{}': link bandwidth_gbps must be positive and latency_us non-negative", name);
    TS_CHECK(l->busy_bandwidth >= 0 && l->busy_bandwidth <= l->bandwidth,
             "config: cluster '{}': a link's busy_bandwidth_gbps must be in [0, bandwidth_gbps] (0: as idle)", name);
    TS_CHECK(l->compute_slowdown >= 1 && l->compute_slowdown <= 100,
             "config: cluster '{}': a link's compute_slowdown must be in [1, 100] (1: none)", name);
  }
  auto fraction = [&](const char* key, double v) {
    TS_CHECK(v > 0 && v <= 1, "config: cluster '{}': cluster.efficiency.{} = {} must be a fraction in (0, 1]", name, key, v);
  };
  fraction("gemm", efficiency.gemm);
  fraction("memory", efficiency.memory);
  fraction("link", efficiency.link);
  TS_CHECK(efficiency.kernel_overhead >= 0, "config: cluster '{}': cluster.efficiency.kernel_overhead_us must be non-negative", name);
  check_curve(efficiency.gemm_curve, name, "cluster.efficiency.gemm_efficiency");
  check_curve(efficiency.attention_curve, name, "cluster.efficiency.attention_efficiency");
  check_curve(efficiency.attention_backward_curve, name, "cluster.efficiency.attention_backward_efficiency");
  check_kernels(efficiency.kernels, name, "cluster.efficiency");
  // Both figures or neither: a disk known in one direction cannot time a step, which writes and
  // reads every offloaded byte.
  TS_CHECK(std::isfinite(disk.read_bandwidth) && std::isfinite(disk.write_bandwidth) && disk.read_bandwidth >= 0 &&
               disk.write_bandwidth >= 0 && (disk.read_bandwidth > 0) == (disk.write_bandwidth > 0),
           "config: cluster '{}': cluster.disk.read_gbps = {} and write_gbps = {} must both be positive (GB/s through "
           "the nvme tier's store; tessera plan --calibrate-here --offload-dir DIR measures them), or both left out "
           "when the disk is not known", name, disk.read_bandwidth / kGB, disk.write_bandwidth / kGB);
  TS_CHECK(std::isfinite(disk.mixed_bandwidth) && disk.mixed_bandwidth >= 0 &&
               (disk.mixed_bandwidth == 0 || disk.known()),
           "config: cluster '{}': cluster.disk.mixed_gbps = {} must be positive (GB/s read and written together while "
           "both run at once), and goes with read_gbps and write_gbps; leave it out when it is not measured", name,
           disk.mixed_bandwidth / kGB);
  TS_CHECK(host.cores >= 0, "config: cluster '{}': cluster.host.cores must be positive", name);
  if (host.cores == 0) return;
  TS_CHECK(host.shared_factor.size() == host.shared_latency.size(),
           "config: cluster '{}': cluster.host.oversubscribed and oversubscribed_latency_us need one latency per factor",
           name);
  for (size_t i = 0; i < host.shared_factor.size(); ++i) {
    TS_CHECK(host.shared_factor[i] >= 1 && (i == 0 || host.shared_factor[i] > host.shared_factor[i - 1]) &&
                 host.shared_latency[i] >= 0,
             "config: cluster '{}': cluster.host.oversubscribed must ascend from 1 (processes per core) with "
             "non-negative latencies", name);
  }
  TS_CHECK(!host.processes.empty() && host.processes.front().threads == 1,
           "config: cluster '{}': a host needs a [[cluster.host.process]] entry for 1 thread, then any others by "
           "ascending threads", name);
  for (size_t i = 0; i < host.processes.size(); ++i) {
    const ProcessSpec& p = host.processes[i];
    TS_CHECK(p.threads >= 1 && p.threads <= host.cores && (i == 0 || p.threads > host.processes[i - 1].threads),
             "config: cluster '{}': cluster.host.process threads must ascend within [1, cores = {}]", name, host.cores);
    TS_CHECK(p.memory_bandwidth > 0 && p.kernel_overhead >= 0 && !p.gemm.empty(),
             "config: cluster '{}': the {}-thread cluster.host.process needs a positive memory_bandwidth_gbps, a "
             "non-negative kernel_overhead_us and a gemm curve (gemm_gflop, gemm_efficiency)", name, p.threads);
    check_curve(p.gemm, name, fmt::format("the {}-thread process's gemm_efficiency", p.threads));
    check_curve(p.attention, name, fmt::format("the {}-thread process's attention_efficiency", p.threads));
    check_curve(p.attention_backward, name,
                fmt::format("the {}-thread process's attention_backward_efficiency", p.threads));
    check_kernels(p.kernels, name, fmt::format("the {}-thread cluster.host.process", p.threads));
    TS_CHECK(p.step_efficiency > 0 && p.step_efficiency <= 2,
             "config: cluster '{}': the {}-thread process's step_efficiency = {} must be in (0, 2] (a step's share "
             "of its kernels' prediction)", name, p.threads, p.step_efficiency);
  }
}

ProcessShare process_share(const ClusterSpec& c, int64_t ranks_on_node) {
  if (c.host.cores == 0) return {};
  TS_CHECK(ranks_on_node >= 1, "plan: {} processes on a node of cluster '{}'", ranks_on_node, c.name);
  const int64_t cores = c.host.cores;
  const int64_t threads = std::max<int64_t>(1, cores / ranks_on_node);
  return {threads, std::min(1.0, static_cast<double>(cores) / static_cast<double>(ranks_on_node * threads))};
}

ClusterSpec process_view(const ClusterSpec& c, int64_t ranks_on_node) {
  if (c.host.cores == 0) return c;
  const int64_t cores = c.host.cores;
  const auto [threads, share] = process_share(c, ranks_on_node);
  const ProcessSpec* measured = &c.host.processes.front();
  for (const ProcessSpec& p : c.host.processes) {
    if (p.threads <= threads) measured = &p;
  }
  ClusterSpec v = c;
  const double per_core = static_cast<double>(threads) / static_cast<double>(cores) * share;
  v.device.peak_flops_fp32 = c.device.peak_flops_fp32 * per_core;
  v.device.peak_flops_bf16 = c.device.peak_flops_bf16 * per_core;
  v.device.memory_bandwidth = std::min(measured->memory_bandwidth * share,
                                       c.device.memory_bandwidth / static_cast<double>(ranks_on_node));
  v.efficiency.kernel_overhead = measured->kernel_overhead / share;
  v.efficiency.gemm_curve = measured->gemm;
  v.efficiency.attention_curve = measured->attention;
  v.efficiency.attention_backward_curve = measured->attention_backward;
  v.efficiency.kernels = measured->kernels;
  const double step = measured->step_efficiency;
  for (const KernelKey& key : kKernelKeys) v.efficiency.kernels.*key.cost /= share * step;
  v.efficiency.kernel_overhead /= step;
  v.device.peak_flops_fp32 *= step;
  v.device.peak_flops_bf16 *= step;
  v.device.memory_bandwidth *= step;
  if (!c.host.shared_factor.empty()) {
    // A collective waits for its partner to arrive (and be scheduled): the latency measured
    // between busy processes at this many to a core.
    const double f = static_cast<double>(ranks_on_node * threads) / static_cast<double>(cores);
    const std::vector<double>& x = c.host.shared_factor;
    const std::vector<double>& y = c.host.shared_latency;
    double latency = f <= x.front() ? y.front() : y.back();
    for (size_t i = 1; i < x.size(); ++i) {
      if (f > x[i - 1] && f <= x[i]) latency = y[i - 1] + (f - x[i - 1]) / (x[i] - x[i - 1]) * (y[i] - y[i - 1]);
    }
    v.intra_node.latency = std::max(c.intra_node.latency, latency);
    v.inter_node.latency = std::max(c.inter_node.latency, latency);
  }
  // The machine's memory is shared too.
  v.device.memory_bytes = c.device.memory_bytes / static_cast<double>(ranks_on_node);
  v.device.reserved_bytes = c.device.reserved_bytes / static_cast<double>(ranks_on_node);
  return v;
}

ClusterSpec read_cluster_config(config::TableReader r) {
  ClusterSpec c;
  c.name = r.require<std::string>("name");
  c.description = r.get<std::string>("description", "");
  c.devices_per_node = r.require<int>("devices_per_node");
  c.max_nodes = r.get<int64_t>("nodes", 0);

  config::TableReader d = r.table("device");
  c.device.name = d.require<std::string>("name");
  c.device.peak_flops_fp32 = d.require<double>("peak_tflops_fp32") * kTera;
  c.device.peak_flops_bf16 = d.require<double>("peak_tflops_bf16") * kTera;
  c.device.memory_bytes = d.require<double>("memory_gib") * kGiB;
  c.device.reserved_bytes = d.get<double>("reserved_gib", 0.0) * kGiB;
  c.device.memory_bandwidth = d.require<double>("memory_bandwidth_gbps") * kGB;
  d.finish();

  c.intra_node = read_link(r.table("intra_node"));
  c.inter_node = read_link(r.table("inter_node"));

  config::TableReader e = r.table("efficiency");
  c.efficiency.gemm = e.get<double>("gemm", c.efficiency.gemm);
  c.efficiency.memory = e.get<double>("memory", c.efficiency.memory);
  c.efficiency.link = e.get<double>("link", c.efficiency.link);
  c.efficiency.kernel_overhead = e.get<double>("kernel_overhead_us", c.efficiency.kernel_overhead / kMicro) * kMicro;
  c.efficiency.gemm_curve = read_curve(e, "gemm");
  c.efficiency.attention_curve = read_curve(e, "attention");
  c.efficiency.attention_backward_curve = read_curve(e, "attention_backward");
  c.efficiency.kernels = read_kernels(e);
  e.finish();

  config::TableReader h = r.table("host");
  c.host.cores = h.get<int>("cores", 0);
  for (config::TableReader p : h.tables("process")) {
    ProcessSpec process;
    process.threads = p.require<int>("threads");
    process.memory_bandwidth = p.require<double>("memory_bandwidth_gbps") * kGB;
    process.kernel_overhead = p.require<double>("kernel_overhead_us") * kMicro;
    process.gemm = read_curve(p, "gemm");
    process.attention = read_curve(p, "attention");
    process.attention_backward = read_curve(p, "attention_backward");
    process.kernels = read_kernels(p);
    process.step_efficiency = p.get<double>("step_efficiency", 1.0);
    p.finish();
    c.host.processes.push_back(std::move(process));
  }
  c.host.shared_factor = h.get<std::vector<double>>("oversubscribed", {});
  c.host.shared_latency = h.get<std::vector<double>>("oversubscribed_latency_us", {});
  for (double& l : c.host.shared_latency) l *= kMicro;
  TS_CHECK(c.host.cores > 0 || c.host.processes.empty(),
           "config: cluster '{}': [[cluster.host.process]] entries need cluster.host.cores", c.name);
  h.finish();
  config::TableReader disk = r.table("disk");
  c.disk.read_bandwidth = disk.get<double>("read_gbps", 0.0) * kGB;
  c.disk.write_bandwidth = disk.get<double>("write_gbps", 0.0) * kGB;
  c.disk.mixed_bandwidth = disk.get<double>("mixed_gbps", 0.0) * kGB;
  disk.finish();
  r.finish();
  c.validate();
  return c;
}

ClusterSpec load_cluster(const std::string& name_or_path, const std::vector<std::string>& dirs) {
  std::string path = resolve_config_file(name_or_path, "clusters", dirs);
  toml::table root = config::parse_toml_file(path);
  const toml::node* cluster = root.get("cluster");
  TS_CHECK(cluster != nullptr && cluster->is_table(), "plan: '{}' has no [cluster] table", path);
  return read_cluster_config(config::TableReader(*cluster->as_table(), "cluster"));
}

std::string cluster_toml(const ClusterSpec& c) {
  auto link = [](const LinkSpec& l) {
    std::string text = fmt::format("bandwidth_gbps = {}\nlatency_us = {}\n", l.bandwidth / kGB, l.latency / kMicro);
    if (l.busy_bandwidth > 0) text += fmt::format("busy_bandwidth_gbps = {}\n", l.busy_bandwidth / kGB);
    if (l.compute_slowdown != 1) text += fmt::format("compute_slowdown = {}\n", l.compute_slowdown);
    return text;
  };
  std::string out = fmt::format("[cluster]\nname = \"{}\"\ndescription = \"{}\"\ndevices_per_node = {}\nnodes = {}\n\n",
                                c.name, c.description, c.devices_per_node, c.max_nodes);
  out += fmt::format("[cluster.device]\nname = \"{}\"\npeak_tflops_fp32 = {}\npeak_tflops_bf16 = {}\nmemory_gib = {}\n"
                     "reserved_gib = {}\nmemory_bandwidth_gbps = {}\n\n",
                     c.device.name, c.device.peak_flops_fp32 / kTera, c.device.peak_flops_bf16 / kTera,
                     c.device.memory_bytes / kGiB, c.device.reserved_bytes / kGiB, c.device.memory_bandwidth / kGB);
  out += "[cluster.intra_node]\n" + link(c.intra_node) + "\n[cluster.inter_node]\n" + link(c.inter_node) + "\n";
  out += fmt::format("[cluster.efficiency]\ngemm = {}\nmemory = {}\nlink = {}\nkernel_overhead_us = {}\n", c.efficiency.gemm,
                     c.efficiency.memory, c.efficiency.link, c.efficiency.kernel_overhead / kMicro);
  out += curve_toml(c.efficiency.gemm_curve, "gemm") + curve_toml(c.efficiency.attention_curve, "attention") +
         curve_toml(c.efficiency.attention_backward_curve, "attention_backward") + kernels_toml(c.efficiency.kernels);
  if (c.disk.known()) {
    out += fmt::format("\n[cluster.disk]\nread_gbps = {}\nwrite_gbps = {}\n", c.disk.read_bandwidth / kGB,
                       c.disk.write_bandwidth / kGB);
    if (c.disk.mixed_bandwidth > 0) out += fmt::format("mixed_gbps = {}\n", c.disk.mixed_bandwidth / kGB);
  }
  if (c.host.cores == 0) return out;
  out += fmt::format("\n[cluster.host]\ncores = {}\n", c.host.cores);
  if (!c.host.shared_factor.empty()) {
    std::vector<double> us;
    for (double l : c.host.shared_latency) us.push_back(l / kMicro);
    out += fmt::format("oversubscribed = [{}]\noversubscribed_latency_us = [{}]\n", fmt::join(c.host.shared_factor, ", "),
                       fmt::join(us, ", "));
  }
  for (const ProcessSpec& p : c.host.processes) {
    out += fmt::format("\n[[cluster.host.process]]\nthreads = {}\nmemory_bandwidth_gbps = {}\nkernel_overhead_us = {}\n"
                       "step_efficiency = {}\n",
                       p.threads, p.memory_bandwidth / kGB, p.kernel_overhead / kMicro, p.step_efficiency);
    out += curve_toml(p.gemm, "gemm") + curve_toml(p.attention, "attention") +
           curve_toml(p.attention_backward, "attention_backward") + kernels_toml(p.kernels);
  }
  return out;
}

}  // namespace tessera::plan
