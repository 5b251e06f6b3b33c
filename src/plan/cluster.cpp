#include "plan/cluster.h"

#include "core/check.h"

namespace tessera::plan {

namespace {
constexpr double kTera = 1e12;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kMicro = 1e-6;

LinkSpec read_link(config::TableReader r) {
  LinkSpec link;
  link.bandwidth = r.require<double>("bandwidth_gbps") * kGB;
  link.latency = r.require<double>("latency_us") * kMicro;
  r.finish();
  return link;
}
}  // namespace

std::string precision_name(Precision p) { return p == Precision::Bf16 ? "bf16" : "fp32"; }

void ClusterSpec::validate() const {
  TS_CHECK(!name.empty(), "config: cluster.name must not be empty");
  TS_CHECK(device.peak_flops_fp32 > 0 && device.peak_flops_bf16 > 0,
           "config: cluster '{}': cluster.device.peak_tflops_fp32 and peak_tflops_bf16 must be positive", name);
  TS_CHECK(device.memory_bytes > 0, "config: cluster '{}': cluster.device.memory_gib must be positive", name);
  TS_CHECK(device.reserved_bytes >= 0 && device.reserved_bytes < device.memory_bytes,
           "config: cluster '{}': cluster.device.reserved_gib must be in [0, memory_gib)", name);
  TS_CHECK(device.memory_bandwidth > 0, "config: cluster '{}': cluster.device.memory_bandwidth_gbps must be positive", name);
  TS_CHECK(devices_per_node >= 1, "config: cluster '{}': cluster.devices_per_node must be at least 1", name);
  TS_CHECK(max_nodes >= 0, "config: cluster '{}': cluster.nodes must be 0 (unbounded) or positive", name);
  for (const LinkSpec* l : {&intra_node, &inter_node}) {
    TS_CHECK(l->bandwidth > 0 && l->latency >= 0,
             "config: cluster '{}': link bandwidth_gbps must be positive and latency_us non-negative", name);
  }
  auto fraction = [&](const char* key, double v) {
    TS_CHECK(v > 0 && v <= 1, "config: cluster '{}': cluster.efficiency.{} = {} must be a fraction in (0, 1]", name, key, v);
  };
  fraction("gemm", efficiency.gemm);
  fraction("memory", efficiency.memory);
  fraction("link", efficiency.link);
  TS_CHECK(efficiency.kernel_overhead >= 0, "config: cluster '{}': cluster.efficiency.kernel_overhead_us must be non-negative", name);
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
  e.finish();
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

}  // namespace tessera::plan
