#include "plan/report.h"

#include <algorithm>

#include <fmt/format.h>

#include "plan/moe_model.h"

#include "plan/recompute_model.h"

namespace tessera::plan {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string human_count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.0f}", n);
}

// The schedule behind an every_k or optimal prediction, per microbatch, in the budget's unit, so
// that it can be held against the runtime's plan of the same chain.
std::string describe_recompute(const config::ModelConfig& m, const Layout& l, int stage) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const ChunkRecompute r = chunk_recompute(m, l, stage);
  const int layers = static_cast<int>(r.chain.size()) - 1;
  const std::string policy = l.recompute == config::RecomputePolicy::EveryK
                                 ? fmt::format("every_k with k={}", r.every_k)
                                 : fmt::format("{} within {} MiB per microbatch", config::recompute_policy_name(l.recompute),
                                               l.activation_budget_mb);
  const double edges = stage_edge_bytes(m, l, stage);
  return fmt::format("         recompute {}: stage {} reruns {} layer forwards per microbatch on each chunk of {} layers;\n"
                     "         a chunk keeps {:.1f} MiB after its forward and peaks at {:.1f} MiB ({:.1f} MiB with the "
                     "embedding and head)\n",
                     policy, stage, r.simulation.recomputed_forwards, layers,
                     static_cast<double>(r.simulation.after_forward_bytes) / kMiB,
                     static_cast<double>(r.simulation.peak_bytes) / kMiB,
                     (static_cast<double>(r.simulation.peak_bytes) + edges) / kMiB);
}

std::string short_layout(const Layout& l) {
  return fmt::format("{:>3} {:>3} {:>5} {:>2} {:>3} {:>3} {:>4} {:<9}", l.tp, l.pp, l.dp, l.virtual_stages, l.micro_batch,
                     l.sp ? "yes" : "no", l.zero_stage, config::recompute_policy_name(l.recompute));
}
// The step's time by part, each with its share; the nvme tier's I/O when the run offloads.
std::string format_step_time(const TimeBreakdown& t, bool with_io) {
  std::string out = "time per step, seconds:\n";
  auto line = [&](const char* name, double s) {
    out += fmt::format("  {:<12} {:9.4f}  {:5.1f}%\n", name, s, t.step > 0 ? 100 * s / t.step : 0.0);
  };
  line("compute", t.compute);
  line("tp comm", t.tp_comm);
  line("pp comm", t.pp_comm);
  line("bubble", t.bubble);
  line("dp comm", t.dp_comm);
  line("optimizer", t.optimizer);
  if (with_io) line("nvme I/O", t.io);
  out += fmt::format("  {:<12} {:9.4f}\n", "step", t.step);
  return out;
}

std::string flop_rate(double flops) {
  return flops >= 1e12 ? fmt::format("{:.0f} TFLOP/s", flops / 1e12) : fmt::format("{:.0f} GFLOP/s", flops / 1e9);
}
}  // namespace

std::string describe_model(const config::ModelConfig& m) {
  const std::string kv_heads = m.kv_heads() != m.n_head ? fmt::format(" kv={}", m.kv_heads()) : "";
  const std::string moe = m.moe_experts > 0
                              ? fmt::format(", MoE {} experts top-{} in {} blocks, {} active per token", m.moe_experts,
                                            m.moe_top_k, m.moe_layers(),
                                            human_count(static_cast<double>(m.active_parameter_count())))
                              : "";
  return fmt::format("{} parameters ({}, L={} h={} a={}{} s={} V={} F={}{}{})",
                     human_count(static_cast<double>(m.parameter_count())), config::architecture_name(m.arch), m.n_layer,
                     m.n_embd, m.n_head, kv_heads, m.seq_len, m.vocab_size, m.ffn(),
                     m.tied_embeddings ? ", tied embeddings" : "", moe);
}

std::string describe_cluster(const ClusterSpec& c) {
  // A machine measured by --calibrate-here (devices_per_node = 0) runs any number of processes on
  // its cores.
  const std::string per_node = c.devices_per_node == 0 ? std::string(", any number of processes on its cores")
                                                       : fmt::format(" x {} per node", c.devices_per_node);
  return fmt::format("{}: {}{}, {} bf16, {} fp32, {:.0f} GiB ({:.1f} usable), {:.0f} GB/s memory, "
                     "{:.3g} GB/s in node, {:.3g} GB/s across nodes",
                     c.name, c.device.name, per_node, flop_rate(c.device.peak_flops_bf16),
                     flop_rate(c.device.peak_flops_fp32), c.device.memory_bytes / kGiB,
                     c.usable_memory() / kGiB, c.device.memory_bandwidth / 1e9, c.intra_node.bandwidth / 1e9,
                     c.inter_node.bandwidth / 1e9);
}

std::string format_plan(const config::ModelConfig& m, const ClusterSpec& c, const PlanRequest& r, const PlanResult& result) {
  std::string out;
  out += fmt::format("model:   {}\n", describe_model(m));
  out += fmt::format("cluster: {}\n", describe_cluster(c));
  out += fmt::format("request: {} devices, global batch {}, {}{}\n", r.devices, r.global_batch, precision_name(r.precision),
                     r.flash_attention ? ", fused attention" : "");
  out += fmt::format("searched {} layouts, {} fit in {:.1f} GiB; best {}:\n\n", result.considered, result.fitting,
                     c.usable_memory() / kGiB, result.best.size());
  out += fmt::format("{:>2} | {:>3} {:>3} {:>5} {:>2} {:>3} {:>3} {:>4} {:<9} | {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {:>8} {:>6} {:>7} {:>6}\n",
                     "#", "tp", "pp", "dp", "v", "mb", "sp", "zero", "recompute", "params", "grads", "optim", "activ", "comm",
                     "work", "total", "step s", "bubble", "TF/s/dv", "MFU");
  out += std::string(2, '-') + "-+-" + std::string(42, '-') + "-+-" + std::string(48, '-') + "-+-" + std::string(31, '-') + "\n";
  int rank = 1;
  for (const auto& e : result.best) {
    const MemoryBreakdown& mem = e.memory.memory;
    out += fmt::format("{:>2} | {} | {:6.1f} {:6.1f} {:6.1f} {:6.1f} {:6.2f} {:6.2f} {:6.1f} | {:8.3f} {:5.1f}% {:7.1f} {:5.1f}%\n", rank++,
                       short_layout(e.layout), mem.params / kGiB, mem.grads / kGiB, mem.optimizer / kGiB,
                       mem.activations / kGiB, mem.comm / kGiB, mem.workspace / kGiB, mem.total() / kGiB, e.time.step,
                       100 * e.time.bubble / e.time.step, e.tflops_per_device, 100 * e.mfu);
  }
  out += "\nmemory in GiB per device (worst pipeline stage); TF/s/dv counts recompute FLOPs, MFU does not.\n";
  if (!result.best.empty()) out += fmt::format("best: --layout \"{}\"\n", to_string(result.best.front().layout));
  return out;
}

std::string format_estimate(const config::ModelConfig& m, const ClusterSpec& c, const Estimate& e) {
  const Layout& l = e.layout;
  const MemoryBreakdown& mem = e.memory.memory;
  const TimeBreakdown& t = e.time;
  std::string out;
  out += fmt::format("model:   {}\n", describe_model(m));
  out += fmt::format("cluster: {}\n", describe_cluster(c));
  out += fmt::format("layout:  {}\n", to_string(l));
  const bool interleaved = l.virtual_stages > 1;
  out += fmt::format("         {} devices, {} microbatches of {} per pipeline per step, schedule {}{}\n", l.devices(),
                     l.microbatches(), l.micro_batch, interleaved ? "interleaved 1f1b" : config::schedule_name(l.schedule),
                     interleaved ? fmt::format(" (v={})", l.virtual_stages) : std::string());
  if (recompute_uses_chain(l.recompute)) out += describe_recompute(m, l, e.memory.stage);
  out += "\n";
  out += fmt::format("memory per device (stage {} of {}), GiB:\n", e.memory.stage, l.pp);
  for (auto tag : kMemoryTags) out += fmt::format("  {:<12} {:9.2f}\n", tag, mem.by_tag(tag) / kGiB);
  out += fmt::format("  {:<12} {:9.2f}   of {:.2f} usable: {}\n\n", "total", mem.total() / kGiB, e.memory_capacity / kGiB,
                     e.fits ? "fits" : "DOES NOT FIT");
  out += format_step_time(t, false) + "\n";
  out += fmt::format("FLOPs per step: forward {:.3e}, backward {:.3e}, recompute {:.3e}\n", e.flops.forward, e.flops.backward,
                     e.flops.recompute);
  if (m.moe_experts > 0) {
    const MoeSummary moe = moe_summary(m, l, c);
    out += fmt::format("MoE: {} parameters, {} read per token; the FLOPs above are the active ones (k = {} of {} "
                       "experts){}\n",
                       human_count(static_cast<double>(moe.total_params)),
                       human_count(static_cast<double>(moe.active_params)), m.moe_top_k, m.moe_experts,
                       l.ep > 1 ? fmt::format("; all-to-all {:.1f} MiB per step per device over ep={} ({:.4f} s, in "
                                              "tp comm), uniform routing",
                                              moe.all_to_all_bytes_per_step / 1048576.0, l.ep,
                                              moe.all_to_all_seconds_per_step)
                                : std::string());
  }
  out += fmt::format("throughput: {:.1f} TFLOP/s per device (hardware), MFU {:.1f}%, HFU {:.1f}%, {:.0f} tokens/s\n",
                     e.tflops_per_device, 100 * e.mfu, 100 * e.hfu, e.tokens_per_second);
  return out;
}

namespace {

// The nvme tier's traffic per step, a column per stage, and its time at the cluster's disk.
std::string format_io(const ClusterSpec& c, const Estimate& e, const std::vector<OffloadIo>& io) {
  constexpr double kMiB = 1024.0 * 1024.0;
  auto row = [&](const char* name, auto value) {
    std::string line = fmt::format("  {:<15}", name);
    for (const OffloadIo& s : io) line += fmt::format(" {:>10}", value(s));
    return line + "\n";
  };
  std::string out = "nvme I/O per step, a rank of each stage (offloaded activations, written after their forward and "
                    "read back once before their backward; offloaded parameters, read for each unit's forward and "
                    "backward; an offloaded optimizer state and master values, read and written back in the "
                    "update):\n";
  out += row("written MiB", [](const OffloadIo& s) { return fmt::format("{:.3f}", s.bytes_written / kMiB); });
  out += row("read MiB", [](const OffloadIo& s) { return fmt::format("{:.3f}", s.bytes_read / kMiB); });
  const bool timed = std::all_of(io.begin(), io.end(), [](const OffloadIo& s) { return s.timed; });
  if (!timed) {
    return out + fmt::format("  cluster '{}' does not give its disk's bandwidth ([cluster.disk] read_gbps and "
                             "write_gbps; `tessera plan --calibrate-here --offload-dir DIR` measures them): the I/O "
                             "is not timed, and the step time below leaves it out\n\n", c.name);
  }
  const int64_t sharing = c.devices_on_a_node(e.layout.devices());
  out += row("seconds", [](const OffloadIo& s) { return fmt::format("{:.4f}", s.seconds); });
  out += row("exposed s", [](const OffloadIo& s) { return fmt::format("{:.4f}", s.exposed_seconds); });
  out += fmt::format("  at the disk's {:.2f} GB/s written and {:.2f} GB/s read{}{}; the copy engine moves the "
                     "activations beside the step's {:.4f} s of forwards and backwards and the optimizer state beside "
                     "its {:.4f} s update, and what outlasts them is exposed\n\n",
                     c.disk.write_bandwidth / 1e9, c.disk.read_bandwidth / 1e9,
                     c.disk.mixed_bandwidth > 0
                         ? fmt::format(" ({:.2f} GB/s together while both run)", c.disk.mixed_bandwidth / 1e9)
                         : std::string(),
                     sharing > 1 ? fmt::format(", shared by the node's {} ranks", sharing) : std::string(),
                     e.time.compute, e.time.optimizer);
  return out;
}

}  // namespace

std::string format_run_estimate(const config::ModelConfig& m, const ClusterSpec& c, const Estimate& e,
                                const std::vector<MemoryBreakdown>& stages, const std::vector<double>& peaks,
                                const std::vector<double>& nvme_peaks, const std::vector<OffloadIo>& io) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const Layout& l = e.layout;
  const TimeBreakdown& t = e.time;
  const bool offloads = std::any_of(nvme_peaks.begin(), nvme_peaks.end(), [](double b) { return b > 0; }) ||
                        std::any_of(io.begin(), io.end(), [](const OffloadIo& s) { return s.bytes_written > 0; });
  std::string out;
  out += fmt::format("model:   {}\n", describe_model(m));
  out += fmt::format("cluster: {}\n", describe_cluster(c));
  out += fmt::format("layout:  {}\n", to_string(l));
  out += fmt::format("         {} ranks (dp {} x tp {} x pp {}), {} microbatches of {} per step, schedule {}\n\n",
                     l.devices(), l.dp, l.tp, l.pp, l.microbatches(), l.micro_batch, config::schedule_name(l.schedule));
  out += fmt::format("memory per rank, MiB (a rank of each pipeline stage): each tag's own peak, then the memory peak, "
                     "every tag at once{}:\n", offloads ? ", and the most the nvme tier holds at once" : "");
  out += fmt::format("  {:<15}", "tag");
  for (size_t s = 0; s < stages.size(); ++s) out += fmt::format(" {:>10}", fmt::format("stage {}", s));
  out += "\n";
  for (auto tag : kEngineMemoryTags) {
    out += fmt::format("  {:<15}", tag);
    for (const MemoryBreakdown& mem : stages) out += fmt::format(" {:>10.3f}", mem.by_tag(tag) / kMiB);
    out += "\n";
  }
  out += fmt::format("  {:<15}", "memory peak");
  size_t worst = 0;
  for (size_t s = 0; s < peaks.size(); ++s) {
    out += fmt::format(" {:>10.3f}", peaks[s] / kMiB);
    if (peaks[s] > peaks[worst]) worst = s;
  }
  out += "\n";
  if (offloads) {
    // The nvme tier beside the compute tier: files in the offload folder, not the device's memory.
    out += fmt::format("  {:<15}", "nvme peak");
    for (double b : nvme_peaks) out += fmt::format(" {:>10.3f}", b / kMiB);
    out += "\n";
  }
  const double peak = peaks.empty() ? 0.0 : peaks[worst];
  out += fmt::format("  the worst rank: stage {}, a memory peak of {:.3f} MiB of {:.1f} GiB usable: {}\n\n", worst,
                     peak / kMiB, e.memory_capacity / kGiB, peak <= e.memory_capacity ? "fits" : "DOES NOT FIT");
  if (offloads) out += format_io(c, e, io);
  out += format_step_time(t, offloads);
  out += fmt::format("throughput: {:.0f} tokens/s, {:.1f} GFLOP/s per rank (hardware)\n", e.tokens_per_second,
                     e.tflops_per_device * 1e3);
  return out;
}

}  // namespace tessera::plan
