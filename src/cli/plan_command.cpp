// `tessera plan`: memory and time of a layout, or the best layouts, of a model on a cluster.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/calibrate_here.h"
#include "cli/commands.h"
#include "cli/errors.h"
#include "train/planned_run.h"
#include "cli/run_overrides.h"
#include "core/check.h"
#include "plan/config_files.h"
#include "plan/memory_model.h"
#include "plan/offload_io.h"
#include "plan/planner.h"
#include "plan/published.h"
#include "plan/report.h"
#include "plan/simulated_pipeline.h"

namespace tessera::cli {

namespace {

struct PlanArgs {
  std::string model;
  std::string cluster;
  int64_t devices = 0;
  int64_t global_batch = 0;
  std::string layout;
  int top = 5;
  std::string precision = "bf16";
  bool flash = false;
  std::string activations = "engine";
  bool overlap = false;
  bool simulate = false;
  bool published = false;
  bool calibrate = false;
  std::string config;   // a `tessera train` config: predict that run
  int64_t ranks = 0;    // with --config: the processes it runs on (dp x tp x pp)
  bool json = false;    // with --config: one JSON object instead of the report
  bool calibrate_here = false;
  std::string out = "cluster-here.toml";  // where --calibrate-here writes
  std::string name = "here";              // the cluster's name in that file
  std::string offload_dir;                // the folder whose disk it measures; "": the output's
  std::string hosts;                      // set: measure the link between these nodes instead
  std::string launch_agent;               // with hosts: how mpirun reaches them
  std::string network;                    // with hosts: the network between them
  std::string links_out;                  // set: this process is a rank of the link measurement
  std::string busy_links_out;             // set: a rank of the busy-pairs latency measurement
  std::string step_out;                   // set: one process of the reference step measurement
  int step_threads = 1;
  std::vector<std::string> options;  // the command's own, for suggestions on a misspelt one
};

// `tessera plan --config`: the run's peak memory per rank by the runtime's tags and its step time.
void run_plan_config(const PlanArgs& a, const std::vector<std::string>& overrides) {
  using namespace tessera::plan;
  TS_CHECK(a.ranks >= 0 && a.ranks <= (1 << 20), "plan: --ranks must be a number of processes from 1 to {}, got {}",
           1 << 20, a.ranks);
  // As under `tessera launch -n ranks`: a config without parallel.dp takes the processes tp and pp leave.
  train::RunConfig config = train::load_run_config(a.config, parse_overrides(overrides, a.options),
                                                   a.ranks > 0 ? static_cast<int>(a.ranks) : 1);
  const train::PlannedRun run = train::planned_run(config);
  config.model.vocab_size = run.model.vocab_size;
  const Layout& l = run.layout;
  if (!run.split_note.empty()) fmt::print(stderr, "warning: plan --config: {}\n", run.split_note);
  TS_CHECK(a.ranks == 0 || a.ranks == l.devices(),
           "plan: --ranks {} but the config runs parallel.dp {} x parallel.tp {} x parallel.pp {} = {} processes; drop "
           "--ranks, or change the layout to match it", a.ranks, l.dp, l.tp, l.pp, l.devices());
  TS_CHECK(!a.cluster.empty(),
           "plan --config needs --cluster: this machine's cluster as `tessera plan --calibrate-here --out FILE` "
           "writes it, or a TOML file or shipped name with a [cluster] table that holds {} processes", l.devices());
  const ClusterSpec cluster = load_cluster(a.cluster);
  const PipelineModel pipeline = a.simulate ? simulated_pipeline() : closed_form_pipeline();
  check_layout(run.model, l, l.devices());
  Estimate est = estimate(run.model, l, cluster, pipeline);
  // The run's own accounting: each tag's peak and the peak of all of them at once, per stage.
  const train::PredictedMemory memory = train::predict_memory(config, run);
  // The nvme tier's traffic of each stage: the activations' beside the step's forwards and
  // backwards, the optimizer state's beside the optimizer's update, which is when it streams (with
  // the delayed update, beside the next step too). The
  // slowest stage's exposed I/O lengthens the step, which waits for its slowest rank.
  std::vector<OffloadIo> io;
  double exposed = 0;
  const int64_t sharing = cluster.devices_on_a_node(l.devices());
  for (size_t s = 0; s < memory.nvme_traffic.size(); ++s) {
    // Offloaded parameters are read for the units' gathers beside the same forwards and backwards,
    // where offloaded gradients are written (and read back to add each microbatch after the first).
    const train::GradientTraffic& grads = memory.nvme_gradient_traffic[s];
    const OffloadIo activations =
        offload_io(cluster, memory.nvme_traffic[s] + grads.written_in_backward,
                   memory.nvme_traffic[s] + memory.nvme_parameter_reads[s] + grads.read_in_backward, sharing,
                   est.time.compute);
    // A delayed update streams the state while the next step computes; its compute still takes the
    // cores, but its disk traffic has the whole step to hide behind.
    const double state_window =
        config.optim.delayed_update_after > 0 ? est.time.compute + est.time.optimizer : est.time.optimizer;
    const OffloadIo state = offload_io(cluster, memory.nvme_optimizer_traffic[s],
                                       memory.nvme_optimizer_traffic[s] + grads.read_in_step, sharing, state_window);
    io.push_back({activations.bytes_written + state.bytes_written, activations.bytes_read + state.bytes_read,
                  activations.timed && state.timed, activations.seconds + state.seconds,
                  activations.exposed_seconds + state.exposed_seconds});
    exposed = std::max(exposed, io.back().exposed_seconds);
  }
  add_exposed_io(est, exposed);
  const bool timed = std::all_of(io.begin(), io.end(), [](const OffloadIo& s) { return s.timed; });
  if (!a.json) {
    fmt::print("{}", format_run_estimate(run.model, cluster, est, memory.tags, memory.peak, memory.nvme, io));
    return;
  }
  // Seconds where the disk is known; null where the run moves bytes the cluster cannot time.
  auto seconds = [&](double s) { return timed ? nlohmann::json(s) : nlohmann::json(nullptr); };
  auto io_of = [&](size_t stage) {
    return nlohmann::json{{"bytes_written", io[stage].bytes_written},
                          {"bytes_read", io[stage].bytes_read},
                          {"seconds", seconds(io[stage].seconds)},
                          {"exposed_seconds", seconds(io[stage].exposed_seconds)}};
  };
  auto tags = [&](size_t stage) {
    nlohmann::json j = nlohmann::json::object();
    for (auto tag : kEngineMemoryTags) j[std::string(tag)] = memory.tags[stage].by_tag(tag);
    j["peak"] = memory.peak[stage];
    j["nvme"] = memory.nvme[stage];
    return j;
  };
  const auto worst = static_cast<size_t>(memory.worst);
  // The step's I/O: the stage that moves the most, whose exposed part lengthens the step.
  size_t busiest = 0;
  for (size_t s = 0; s < io.size(); ++s) {
    if (io[s].bytes_written > io[busiest].bytes_written) busiest = s;
  }
  nlohmann::json step_io = io_of(busiest);
  step_io["stage"] = busiest;
  nlohmann::json out = {{"layout", to_string(l)},
                        {"ranks", l.devices()},
                        {"cluster", cluster.name},
                        {"worst_stage", memory.worst},
                        {"memory", tags(worst)},
                        {"stages", nlohmann::json::array()},
                        {"io", step_io},
                        {"step_seconds", est.time.step},
                        {"time",
                         {{"compute", est.time.compute},
                          {"tp_comm", est.time.tp_comm},
                          {"pp_comm", est.time.pp_comm},
                          {"bubble", est.time.bubble},
                          {"dp_comm", est.time.dp_comm},
                          {"optimizer", est.time.optimizer},
                          {"io", seconds(est.time.io)},
                          {"microbatch_forward", est.microbatch.forward},
                          {"microbatch_backward", est.microbatch.backward},
                          {"microbatch_transfer", est.microbatch.p2p}}}};
  for (size_t s = 0; s < memory.tags.size(); ++s) {
    out["stages"].push_back(tags(s));
    out["stages"].back()["io"] = io_of(s);
  }
  fmt::print("{}\n", out.dump());
}

void run_plan(const PlanArgs& a, const std::vector<std::string>& extras) {
  using namespace tessera::plan;
  if (!a.step_out.empty()) {
    measure_step(a.step_out, a.step_threads);
    return;
  }
  if (!a.links_out.empty() || !a.busy_links_out.empty()) {
    measure_links(a.links_out.empty() ? a.busy_links_out : a.links_out, a.links_out.empty());
    return;
  }
  TS_CHECK(a.calibrate_here || (a.hosts.empty() && a.launch_agent.empty() && a.network.empty()),
           "plan: --hosts, --launch-agent and --network go with --calibrate-here (they measure the link between "
           "nodes)");
  TS_CHECK(!a.hosts.empty() || (a.launch_agent.empty() && a.network.empty()),
           "plan --calibrate-here: --launch-agent and --network go with --hosts (how to reach the nodes whose link it "
           "measures)");
  if (a.calibrate_here) {
    TS_CHECK(extras.empty() && a.config.empty() && a.ranks == 0 && !a.json && a.model.empty() && a.layout.empty(),
             "plan: --calibrate-here measures this machine and takes only --out, --name, --offload-dir and --hosts; "
             "predict a run afterwards with --config run.toml --cluster {}", a.out);
    if (!a.hosts.empty()) {
      TS_CHECK(a.offload_dir.empty(), "plan --calibrate-here --hosts measures only the link between nodes; measure "
               "the disk with --offload-dir in the node's own calibration (without --hosts)");
      calibrate_nodes(a.out, a.hosts, a.launch_agent, a.network);
      return;
    }
    calibrate_here(a.out, a.name, a.offload_dir);
    return;
  }
  TS_CHECK(a.offload_dir.empty(), "plan: --offload-dir goes with --calibrate-here (the folder whose disk it measures); "
           "a run's offload folder is memory.offload_dir in its config");
  if (!a.config.empty()) {
    run_plan_config(a, extras);
    return;
  }
  TS_CHECK(a.ranks == 0 && !a.json, "plan: --ranks and --json go with --config (the run's TOML)");
  const PipelineModel pipeline = a.simulate ? simulated_pipeline() : closed_form_pipeline();
  if (a.published || a.calibrate) {
    ClusterSpec cluster = load_cluster(a.cluster.empty() ? "a100-80gb" : a.cluster);
    if (a.published) {
      fmt::print("Megatron PTD-P Table 1 (Narayanan et al. 2021): predicted vs published TFLOP/s per GPU\n\n{}",
                 format_accuracy_table(table1_accuracy(cluster, pipeline), cluster, pipeline.name));
    }
    if (a.calibrate) {
      fmt::print("efficiency.gemm minimizing the squared log error over Table 1: {:.3f} (cluster file has {})\n",
                 calibrate_gemm_efficiency(cluster, pipeline), cluster.efficiency.gemm);
    }
    return;
  }
  TS_CHECK(!a.model.empty(), "plan: --model is required (a TOML file with a [model] table, or a shipped name such as gpt3-175b)");
  TS_CHECK(!a.cluster.empty(), "plan: --cluster is required (a TOML file with a [cluster] table, or a shipped name such as a100-80gb)");
  TS_CHECK(a.precision == "bf16" || a.precision == "fp32", "plan: --precision {} must be bf16 or fp32", a.precision);
  const config::ModelConfig model = load_model(a.model);
  const ClusterSpec cluster = load_cluster(a.cluster);
  const Precision precision = a.precision == "fp32" ? Precision::Fp32 : Precision::Bf16;
  TS_CHECK(a.activations == "engine" || a.activations == "megatron",
           "plan: --activations {} must be engine (this engine's saved tensors) or megatron (Megatron-LM's, as "
           "Korthikanti et al. count them)", a.activations);
  const ActivationAccounting activations =
      a.activations == "megatron" ? ActivationAccounting::Megatron : ActivationAccounting::Engine;

  if (!a.layout.empty()) {
    Layout base;
    base.precision = precision;
    base.flash_attention = a.flash;
    base.activations = activations;
    base.overlap = a.overlap;
    if (a.global_batch > 0) base.global_batch = a.global_batch;
    Layout l = parse_layout(a.layout, base);
    TS_CHECK(a.global_batch > 0 || a.layout.find("gb=") != std::string::npos,
             "plan: give the global batch with --global-batch or gb= in --layout");
    TS_CHECK(a.global_batch == 0 || l.global_batch == a.global_batch,
             "plan: --global-batch {} and gb={} in --layout disagree; give one", a.global_batch, l.global_batch);
    check_layout(model, l, a.devices > 0 ? a.devices : l.devices());
    fmt::print("{}", format_estimate(model, cluster, estimate(model, l, cluster, pipeline)));
    return;
  }
  TS_CHECK(!a.simulate, "plan: --simulate applies to --layout and --published; the layout search uses the closed forms");
  TS_CHECK(a.devices > 0, "plan: --devices N is required to search layouts (or give one with --layout)");
  TS_CHECK(a.global_batch > 0, "plan: --global-batch B is required (sequences per optimizer step)");
  PlanRequest request;
  request.devices = a.devices;
  request.global_batch = a.global_batch;
  request.precision = precision;
  request.flash_attention = a.flash;
  request.activations = activations;
  request.overlap = a.overlap;
  request.top = a.top;
  fmt::print("{}", format_plan(model, cluster, request, plan_layouts(model, cluster, request)));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "predict memory and step time of parallel layouts; find the fastest that fits");
  cmd->add_option("--model", args->model, "model TOML with a [model] table, or a shipped name (configs/models/)");
  cmd->add_option("--cluster", args->cluster, "cluster TOML with a [cluster] table, or a shipped name (configs/clusters/)");
  auto* devices = cmd->add_option("--devices", args->devices, "number of devices, at least 1");
  auto* global_batch =
      cmd->add_option("--global-batch", args->global_batch, "sequences per optimizer step, at least 1");
  cmd->add_option("--layout", args->layout,
                  "evaluate one layout, e.g. \"tp=8,pp=2,dp=32,v=2,mb=1,zero=1,recompute=full,sp=true,precision=bf16\"");
  cmd->add_option("--top", args->top, "how many of the best layouts to print")->capture_default_str();
  cmd->add_option("--precision", args->precision, "bf16 (with fp32 master weights) or fp32")->capture_default_str();
  cmd->add_flag("--flash", args->flash, "fused attention that never stores the s x s scores");
  cmd->add_option("--activations", args->activations,
                  "whose saved tensors the activation memory counts: engine (this engine's, what a tessera run "
                  "measures) or megatron (Megatron-LM's, as Korthikanti et al. count them; --published always uses it)")
      ->capture_default_str();
  cmd->add_flag("--overlap", args->overlap, "data-parallel and ZeRO communication overlaps compute (not by default)");
  cmd->add_flag("--simulate", args->simulate, "time the pipeline with the schedule simulator instead of the closed forms");
  cmd->add_flag("--published", args->published,
                "print predicted vs published TFLOP/s per GPU for Megatron PTD-P Table 1 (cluster a100-80gb unless --cluster)");
  cmd->add_flag("--calibrate", args->calibrate, "print the efficiency.gemm value that best fits Table 1 on the cluster");
  cmd->add_option("--config", args->config,
                  "a `tessera train` config (with --section.key overrides, as train takes them): predict that run's peak "
                  "memory per rank by tag and its step time on --cluster");
  cmd->add_option("--ranks", args->ranks, "with --config: the processes the run starts (dp x tp x pp; a config without parallel.dp takes dp = ranks / (tp x pp), as under tessera launch)");
  cmd->add_flag("--json", args->json, "with --config: print one JSON object (bytes per tag per stage, seconds)");
  cmd->add_flag("--calibrate-here", args->calibrate_here,
                "measure this machine (GEMM and attention efficiency by size, memory bandwidth, kernel overhead, the "
                "latency and bandwidth between two processes, the disk of --offload-dir) and write it as a cluster "
                "TOML to --out (a few minutes)");
  cmd->add_option("--out", args->out, "with --calibrate-here: the cluster TOML to write")->capture_default_str();
  cmd->add_option("--name", args->name, "with --calibrate-here: the cluster's name")->capture_default_str();
  cmd->add_option("--offload-dir", args->offload_dir,
                  "with --calibrate-here: the folder whose disk it measures for the nvme tier (where runs offload, "
                  "memory.offload_dir; default: --out's folder)");
  cmd->add_option("--hosts", args->hosts,
                  "with --calibrate-here: measure the link between the first two of these nodes (as launch's --hosts, "
                  "e.g. node1:1,node2:1) and write it as the inter-node link of --out, an existing cluster file of one "
                  "node, whose other figures stay (a minute or less)");
  cmd->add_option("--launch-agent", args->launch_agent,
                  "with --hosts: how mpirun starts its daemons on the nodes (as launch's --launch-agent)");
  cmd->add_option("--network", args->network,
                  "with --hosts: the interface or subnet between the nodes (as launch's --network)");
  // The ranks of --calibrate-here's link measurement, which it starts through `tessera launch`.
  cmd->add_option("--calibrate-links", args->links_out)->group("");
  cmd->add_option("--calibrate-busy-links", args->busy_links_out)->group("");
  cmd->add_option("--calibrate-step", args->step_out)->group("");
  cmd->add_option("--step-threads", args->step_threads)->group("");
  cmd->allow_extras();
  cmd->callback([cmd, args, devices, global_batch] {
    // Explicit checks: 0 must not read as "not given", and CLI11's range messages are unclear.
    TS_CHECK(devices->count() == 0 || args->devices >= 1, "plan: --devices must be at least 1, got {}", args->devices);
    TS_CHECK(global_batch->count() == 0 || args->global_batch >= 1,
             "plan: --global-batch must be at least 1 (sequences per optimizer step), got {}", args->global_batch);
    TS_CHECK(args->top >= 1, "plan: --top must be at least 1 (how many layouts to print), got {}", args->top);
    // Words of no option are the run's overrides, which only --config takes: without it, the
    // usual "has no option ...; did you mean" for a misspelt option.
    if (args->config.empty() && !cmd->remaining().empty()) throw CLI::ExtrasError(cmd->remaining());
    // A run's layout, batch and precision are its config's keys: the search's options would be
    // ignored there, and a prediction of something other than what was asked is worse than none.
    if (!args->config.empty()) {
      for (const char* search_only : {"--model", "--devices", "--global-batch", "--layout", "--top", "--precision",
                                      "--flash", "--activations", "--overlap", "--published", "--calibrate"}) {
        if (cmd->count(search_only) == 0) continue;
        throw UsageError(fmt::format(
            "plan: {} goes with the layout search (--model, --devices, --global-batch, --layout, --top, --precision), "
            "not with --config: "
            "the run's model, layout, batch and precision are its config's keys; override them as train takes them "
            "(e.g. --parallel.tp 2 --train.batch_size 32 --precision.compute bf16)",
            search_only));
      }
    }
    args->options = option_names(*cmd);
    run_plan(*args, cmd->remaining());
  });
}

}  // namespace tessera::cli
