// Checkmate's MILP (memory/remat) on the training graph of a chain of equal units: how long CBC
// takes, which path gave the schedule, and how it compares with Rotor's dynamic program at the
// same budget. Prints a table and writes JSON (--json).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "memory/chain.h"
#include "memory/optimal.h"
#include "memory/remat/chain_checkmate.h"
#include "memory/remat/graph.h"
#include "memory/remat/milp.h"

using namespace tessera;
using namespace tessera::memory;

int main(int argc, char** argv) {
  CLI::App app{"Solve times of Checkmate's rematerialization MILP on a chain's training graph"};
  int units_count = 33;
  double time_limit = 60;
  std::vector<double> fractions = {1.0, 0.75, 0.5};
  std::string json_path;
  app.add_option("--units", units_count, "units of the chain (the graph has 3 units nodes)");
  app.add_option("--time-limit", time_limit, "CBC's time limit per solve, seconds");
  app.add_option("--fractions", fractions,
                 "budgets as fractions of the way from Rotor's least budget to keeping everything");
  app.add_option("--json", json_path, "write the rows here too");
  CLI11_PARSE(app, argc, argv);

  // Transformer-like: x_0 small, every block's input and activations of one size.
  std::vector<ChainUnit> units(static_cast<size_t>(units_count));
  for (int i = 0; i < units_count; ++i) {
    units[i].input_bytes = i == 0 ? 1 : 4;
    units[i].own_bytes = 12;
    units[i].output_bytes = i + 1 < units_count ? 4 : 0;
    units[i].forward_time = 1;
    units[i].backward_time = 2;
  }
  const double x0_cost = 1e4;
  const auto graph = remat::chain_graph(units, x0_cost);
  const int64_t least = memory::minimum_budget(units, 1);
  const int64_t all = remat::simulate_schedule(graph, remat::keep_everything_schedule(graph)).peak_bytes;
  fmt::print("{} units, {} nodes; Rotor's least budget {}, keep-everything peak {}\n", units_count, graph.size(), least,
             all);
  fmt::print("{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "budget", "status", "seconds", "milp time", "rotor time",
             "peak");
  auto rows = nlohmann::json::array();
  for (double f : fractions) {
    const auto budget = least + static_cast<int64_t>(f * static_cast<double>(all - least));
    const auto rotor = memory::simulate(units, optimal_schedule(units, budget, 1));
    const auto sol = remat::solve_milp(graph, budget, remat::SolveOptions{.time_limit_s = time_limit});
    const double milp_time = sol.has_schedule() ? sol.cost - x0_cost : 0;
    fmt::print("{:>8} {:>10} {:>10.2f} {:>10.1f} {:>10.1f} {:>10}\n", budget, remat::solve_status_name(sol.status),
               sol.solve_seconds, milp_time, rotor.time, sol.peak_bytes);
    rows.push_back({{"budget", budget},
                    {"status", remat::solve_status_name(sol.status)},
                    {"seconds", sol.solve_seconds},
                    {"milp_time", milp_time},
                    {"rotor_time", rotor.time},
                    {"peak", sol.peak_bytes}});
  }
  if (!json_path.empty())
    std::ofstream(json_path) << rows.dump(1) << '\n';
  return 0;
}
