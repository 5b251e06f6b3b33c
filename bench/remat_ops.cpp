// Checkmate (memory/remat) over the graph of operations of transformer blocks, recorded by running
// them (exec/op_graph_recording.h), against Rotor (memory/optimal.h) over the same blocks as a
// chain of units with the same measured op times: at budgets from below Rotor's least to none's
// peak, each one's extra compute (schedule time over the time of running every op once, less 1).
// DTR (memory/remat/graph_dtr.h) runs over the same graph at each budget; CBC starts from the cheapest
// schedule at hand that fits: one found at a lower budget, Rotor's mapped into the op graph, or DTR's, which is
// the only one below Rotor's least budget before CBC has found any.
// Prints two lines per budget:
//   RESULT remat method=checkmate graph=ops arch=<a> blocks=<n> budget_mb=<b> extra_compute=<x> rotor=<y|none>
//          status=<s> solve_seconds=<t>
//   RESULT remat method=dtr graph=ops arch=<a> blocks=<n> budget_mb=<b> extra_compute=<x|none> checkmate=<y|none>
// (DTR's extra compute, then Checkmate's at the same budget; none where a method found no schedule).
// budget_mb in MiB (2^20 bytes) of the graph's values: activations, gradients counted 0 (op_graph.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "exec/op_graph_recording.h"
#include "memory/chain.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"
#include "memory/remat/graph_dtr.h"
#include "memory/remat/milp.h"
#include "nn/gpt.h"

using namespace tessera;

namespace {

config::ModelConfig gpt2_124m(config::Architecture arch, int channels, int heads) {
  config::ModelConfig c;
  c.arch = arch;
  c.n_layer = 12;
  c.n_head = heads;
  c.n_embd = channels;
  c.vocab_size = 50257;
  c.seq_len = 1024;
  c.bias = arch == config::Architecture::Gpt2;
  return c;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checkmate over a block's recorded graph of operations against Rotor over the unit chain"};
  int blocks = 2, repeats = 3, channels = 768, heads = 12;
  bool show_graph = false;
  int64_t B = 4, T = 256;
  double time_limit = 60;
  std::vector<std::string> archs = {"gpt2", "llama"};
  std::vector<double> fractions = {0.0, 0.25, 0.5, 0.75, 1.0};
  app.add_option("--blocks", blocks, "consecutive blocks recorded and solved as one graph");
  app.add_option("--channels", channels, "C (the 124M model's 768)");
  app.add_option("--heads", heads, "attention heads (the 124M model's 12)");
  app.add_flag("--show-graph", show_graph, "print every node: cost (ms), bytes, inputs; and the chain's units");
  app.add_option("--batch", B, "microbatch B");
  app.add_option("--seq", T, "sequence length T");
  app.add_option("--repeats", repeats, "runs recorded; each op costs its least time");
  app.add_option("--time-limit", time_limit, "CBC's time limit per solve, seconds");
  app.add_option("--arch", archs, "gpt2, llama");
  app.add_option("--fractions", fractions, "budgets as fractions of the way from Rotor's least to none's peak");
  CLI11_PARSE(app, argc, argv);

  for (const std::string& name : archs) {
    const config::Architecture arch = name == "llama" ? config::Architecture::Llama : config::Architecture::Gpt2;
    const config::ModelConfig c = gpt2_124m(arch, channels, heads);
    MemoryAccountant memory;
    nn::GPT model(c, memory, 1);
    const exec::OpGraphRecording r = exec::record_op_graph(model, memory, 1, blocks, B, T, repeats);
    const memory::remat::OpGraph& g = r.graph;
    const double pinned = g.pinned_cost * g.sources;
    if (show_graph) {
      for (int i = 0; i < g.graph.size(); ++i) {
        const auto& n = g.graph.nodes[static_cast<size_t>(i)];
        fmt::print("{:4} {:22} {:10.4f} {:10} [{}]\n", i, n.name, n.cost, n.bytes, fmt::join(n.inputs, ","));
      }
      for (const auto& u : g.chain) {
        fmt::print("unit: input {} own {} output {} forward extra {}, forward {:.4f} ms, backward {:.4f} ms\n",
                   u.input_bytes, u.own_bytes, u.output_bytes, u.forward_extra_bytes, u.forward_time, u.backward_time);
      }
    }
    const int64_t rotor_least = memory::minimum_budget(g.chain);
    const int64_t none_peak = memory::simulate(g.chain, memory::none_schedule(blocks)).peak_bytes;
    const memory::remat::SolveOptions options{.time_limit_s = time_limit};
    const memory::remat::MinimumBudget least = memory::remat::minimum_budget(g.graph, options);
    fmt::print("== {} (C {}, {} heads, B {}, T {}), {} blocks: {} nodes, ops {:.2f} ms once; Rotor's least {:.2f} MiB, "
               "none's peak {:.2f} MiB, Checkmate's least {:.2f} MiB ({})\n",
               name, c.n_embd, c.n_head, B, T, blocks, g.graph.size(), g.op_cost, mib(rotor_least), mib(none_peak),
               mib(least.bytes), least.proven ? "proven" : "not proven");
    // Below Rotor's least: Checkmate's own least (when it is lower) and two budgets between.
    std::vector<int64_t> budgets;
    if (least.bytes < rotor_least) budgets.push_back(least.bytes);
    for (double f : {0.7, 0.85}) {
      const auto b = static_cast<int64_t>(f * static_cast<double>(rotor_least));
      if (b > least.bytes || !least.proven) budgets.push_back(b);
    }
    for (double f : fractions) {
      budgets.push_back(rotor_least + static_cast<int64_t>(f * static_cast<double>(none_peak - rotor_least)));
    }
    // Budgets ascend, so a schedule found at one fits every later one: CBC starts from the cheapest of it,
    // Rotor's schedule mapped into the op graph and DTR's.
    std::optional<memory::remat::Schedule> found;
    double found_cost = 0;
    // Sums of hundreds of milliseconds leave a rounding residue around 1e-12: print it as 0.
    const auto extra_compute = [&](double cost) {
      const double x = (cost - pinned) / g.op_cost - 1;
      return fmt::format("{:.4f}", std::abs(x) < 5e-5 ? 0.0 : x);
    };
    for (int64_t budget : budgets) {
      std::string rotor = "none";
      memory::remat::SolveOptions solve = options;
      solve.start = found;
      double start_cost = found_cost;
      if (budget >= rotor_least) {
        const memory::ChainSchedule chain = memory::optimal_schedule(g.chain, budget);
        const auto sim = memory::simulate(g.chain, chain);
        rotor = fmt::format("{:.4f}", std::max(0.0, sim.time / g.op_cost - 1));
        const memory::remat::Schedule mapped = memory::remat::op_graph_schedule(g, chain);
        const auto mapped_sim = memory::remat::simulate_schedule(g.graph, mapped);
        if (mapped_sim.peak_bytes <= budget && (!solve.start || mapped_sim.cost < start_cost)) {
          solve.start = mapped;
          start_cost = mapped_sim.cost;
        }
      }
      const auto dtr = memory::remat::graph_dtr_schedule(g.graph, budget);
      if (dtr && (!solve.start || dtr->cost < start_cost)) solve.start = dtr->schedule;
      const memory::remat::Solution s = memory::remat::solve_milp(g.graph, budget, solve);
      if (s.has_schedule() && (!found || s.cost < found_cost)) {
        found = s.schedule;
        found_cost = s.cost;
      }
      const std::string checkmate = s.has_schedule() ? extra_compute(s.cost) : "none";
      fmt::print("RESULT remat method=checkmate graph=ops arch={} blocks={} budget_mb={:.2f} extra_compute={} rotor={} "
                 "status={} solve_seconds={:.1f}\n",
                 name, blocks, mib(budget), checkmate, rotor, memory::remat::solve_status_name(s.status),
                 s.solve_seconds);
      fmt::print("RESULT remat method=dtr graph=ops arch={} blocks={} budget_mb={:.2f} extra_compute={} checkmate={}\n",
                 name, blocks, mib(budget), dtr ? extra_compute(dtr->cost) : "none", checkmate);
    }
  }
  return 0;
}
