#include "memory/remat/chain_checkmate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "memory/optimal.h"
#include "memory/remat/cache.h"

namespace tessera::memory::remat {

int ChainGraph::backward_start(int unit) const {
  return backward_extra[unit] >= 0 ? backward_extra[unit] : backward[unit];
}

ChainGraph chain_training_graph(std::span<const ChainUnit> units) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  ChainGraph c;
  const auto none = std::vector<int>(static_cast<size_t>(n), -1);
  c.input = c.forward_extra = c.activations = c.rebuildable = c.backward_extra = c.backward = none;
  Graph& g = c.graph;
  const auto add = [&g](std::string name, double cost, int64_t bytes, std::vector<int> inputs) {
    g.nodes.push_back({std::move(name), cost, bytes, std::move(inputs)});
    return g.size() - 1;
  };
  c.input[0] = add("x0", 0.0, units[0].input_bytes, {});
  for (int i = 0; i < n; ++i) {
    const ChainUnit& u = units[i];
    std::vector<int> reads = {c.input[i]};
    if (u.forward_extra_bytes > 0) {
      c.forward_extra[i] = add(fmt::format("e{}", i), 0.0, u.forward_extra_bytes, {c.input[i]});
      reads.push_back(c.forward_extra[i]);
    }
    // The rebuildable part costs its rebuild; the rest of the forward costs what is left, so that a
    // unit forward (both) costs forward_time and a backward's rebuild (r alone) rebuild_time.
    const bool rebuilds = u.rebuildable_bytes > 0;
    const double rebuild_cost = rebuilds ? std::min(u.rebuild_time, u.forward_time) : 0.0;
    c.activations[i] = add(fmt::format("a{}", i), u.forward_time - rebuild_cost, u.own_bytes - u.rebuildable_bytes, reads);
    if (rebuilds) {
      c.rebuildable[i] = add(fmt::format("r{}", i), rebuild_cost, u.rebuildable_bytes, {c.input[i], c.activations[i]});
    }
    if (i + 1 < n) {
      reads.push_back(c.activations[i]);
      if (rebuilds) reads.push_back(c.rebuildable[i]);
      c.input[i + 1] = add(fmt::format("x{}", i + 1), 0.0, u.output_bytes, reads);
    }
  }
  for (int i = n - 1; i >= 0; --i) {
    std::vector<int> reads = {c.activations[i], c.input[i]};
    if (c.rebuildable[i] >= 0) reads.push_back(c.rebuildable[i]);
    if (i + 1 < n) reads.push_back(c.backward[i + 1]);
    if (units[i].backward_extra_bytes > 0) {
      c.backward_extra[i] = add(fmt::format("h{}", i), 0.0, units[i].backward_extra_bytes, reads);
      reads.push_back(c.backward_extra[i]);
    }
    c.backward[i] = add(fmt::format("g{}", i), units[i].backward_time, 0, reads);
  }
  return c;
}

Graph chain_graph(std::span<const ChainUnit> units, double input_cost) {
  TS_CHECK(std::isfinite(input_cost) && input_cost >= 0, "the chain input's cost must be finite and not negative");
  for (size_t i = 0; i < units.size(); ++i) {
    TS_CHECK(units[i].forward_extra_bytes == 0 && units[i].backward_extra_bytes == 0 && units[i].rebuildable_bytes == 0,
             "unit {} has forward or backward extra bytes or a rebuildable part; chain_training_graph gives them nodes "
             "of their own", i);
  }
  Graph g = chain_training_graph(units).graph;
  g.nodes[0].cost = input_cost;
  return g;
}

std::vector<ScheduleConstraint> chain_constraints(const ChainGraph& chain) {
  using M = ScheduleTerm::Matrix;
  const int N = chain.graph.size(), n = static_cast<int>(chain.activations.size());
  std::vector<ScheduleConstraint> out;
  const auto fix_zero = [&out](M m, int t, int v) { out.push_back({{{m, t, v, 1}}, 0, 0}); };
  for (int t = 1; t < N; ++t) fix_zero(M::R, t, chain.input[0]);
  std::vector<bool> extra(static_cast<size_t>(N), false);
  for (int e : chain.forward_extra) {
    if (e >= 0) extra[e] = true;
  }
  const int first_backward = chain.backward_start(n - 1);
  for (int t = 0; t < first_backward; ++t) {
    for (int k = 0; k < t; ++k) {
      if (!extra[k]) fix_zero(M::R, t, k);
    }
  }
  for (int i = 0; i < n; ++i) {
    const int a = chain.activations[i], r = chain.rebuildable[i], x = chain.input[i], start = chain.backward_start(i);
    const int out_node = i + 1 < n ? chain.input[i + 1] : -1;
    for (int t = 0; t < N; ++t) {
      if (out_node >= 0 && t > out_node) out.push_back({{{M::R, t, out_node, 1}, {M::R, t, a, -1}}, 0, 0});
      if (t > a) out.push_back({{{M::S, t, a, 1}, {M::S, t, x, -1}}, -1e30, 0});
      const int kept_from = out_node >= 0 ? out_node : std::max(a, r);
      if (t > kept_from && t < start && t + 1 < N) out.push_back({{{M::S, t + 1, a, 1}, {M::S, t, a, -1}}, 0, 1e30});
      if (r >= 0 && t > r) {
        // A unit forward makes the rebuildable part with the rest; alone it runs only where the unit's
        // backward rebuilds it. It is kept only with the rest, and once kept past the forward, until then.
        const bool rebuild_stage = t == start || t == chain.backward[i];
        out.push_back({{{M::R, t, r, 1}, {M::R, t, a, -1}}, 0, rebuild_stage ? 1e30 : 0});
        out.push_back({{{M::S, t, r, 1}, {M::S, t, a, -1}}, -1e30, 0});
        if (t > kept_from && t < start && t + 1 < N) out.push_back({{{M::S, t + 1, r, 1}, {M::S, t, r, -1}}, 0, 1e30});
      }
      if (t >= x && t < start && t + 1 < N) {
        ScheduleConstraint held{{{M::S, t + 1, x, 1}, {M::R, t, x, -1}, {M::S, t, x, -1}, {M::R, t, a, 1}}, 0, 1e30};
        if (out_node >= 0) held.terms.push_back({M::R, t, out_node, 1});
        out.push_back(std::move(held));
      }
    }
  }
  return out;
}

namespace {

// The nodes a unit forward computes, in order.
std::vector<int> forward_nodes(const ChainGraph& chain, int unit) {
  std::vector<int> nodes;
  if (chain.forward_extra[unit] >= 0) nodes.push_back(chain.forward_extra[unit]);
  nodes.push_back(chain.activations[unit]);
  if (chain.rebuildable[unit] >= 0) nodes.push_back(chain.rebuildable[unit]);
  if (unit + 1 < static_cast<int>(chain.input.size())) nodes.push_back(chain.input[unit + 1]);
  return nodes;
}

}  // namespace

Schedule checkmate_schedule(const ChainGraph& chain, std::span<const ChainUnit> units, const ChainSchedule& schedule) {
  const int N = chain.graph.size(), n = static_cast<int>(units.size());
  TS_CHECK(static_cast<int>(chain.activations.size()) == n, "a chain of {} units given for a graph of {}", n,
           chain.activations.size());
  simulate(units, schedule);  // throws on a schedule chain.h does not run
  Schedule s;
  s.R.assign(static_cast<size_t>(N), std::vector<std::uint8_t>(static_cast<size_t>(N), 0));
  s.S = s.R;
  std::vector<std::uint8_t> resident(static_cast<size_t>(N), 0);
  const auto open_stage = [&](int t) {
    for (int v = 0; v < t; ++v) s.S[t][v] = resident[v];
  };
  int below = n;  // chain.h's b: the lowest unit whose backward is done
  std::vector<bool> rebuild(static_cast<size_t>(n), false);  // kept by a Selective forward: rebuilt in its backward
  // What survives a unit forward, by chain.h's rules.
  const auto after_forward = [&](int i, Keep keep) {
    if (chain.forward_extra[i] >= 0) resident[chain.forward_extra[i]] = 0;
    if (keep != Keep::All && keep != Keep::Selective) resident[chain.activations[i]] = 0;
    if (keep != Keep::All && chain.rebuildable[i] >= 0) resident[chain.rebuildable[i]] = 0;
    rebuild[i] = keep == Keep::Selective;
    if (keep == Keep::Nothing) resident[chain.input[i]] = 0;
    if (i + 1 < n && i + 1 >= below) resident[chain.input[i + 1]] = 0;
  };
  s.R[0][0] = 1;
  resident[chain.input[0]] = 1;
  for (const ChainOp& op : schedule.forward) {
    for (int v : forward_nodes(chain, op.unit)) {
      open_stage(v);
      s.R[v][v] = 1;
      resident[v] = 1;
    }
    after_forward(op.unit, op.keep);
  }
  std::vector<ChainOp> pending;
  for (const ChainOp& op : schedule.backward) {
    if (op.is_forward()) {
      pending.push_back(op);
      continue;
    }
    const int i = op.unit, t = chain.backward_start(i);
    open_stage(t);
    for (const ChainOp& f : pending) {
      for (int v : forward_nodes(chain, f.unit)) {
        s.R[t][v] = 1;
        resident[v] = 1;
      }
      after_forward(f.unit, f.keep);
    }
    pending.clear();
    if (rebuild[i]) {
      s.R[t][chain.rebuildable[i]] = 1;
      resident[chain.rebuildable[i]] = 1;
    }
    if (chain.backward_extra[i] >= 0) {
      s.R[t][t] = 1;
      resident[t] = 1;
      open_stage(chain.backward[i]);
    }
    s.R[chain.backward[i]][chain.backward[i]] = 1;
    for (int v : {chain.activations[i], chain.rebuildable[i], chain.input[i], chain.backward_extra[i],
                  i + 1 < n ? chain.backward[i + 1] : -1}) {
      if (v >= 0) resident[v] = 0;
    }
    resident[chain.backward[i]] = 1;
    below = i;
  }
  return s;
}

std::optional<ChainSchedule> chain_schedule(const ChainGraph& chain, const Schedule& schedule) {
  const int N = chain.graph.size(), n = static_cast<int>(chain.activations.size());
  std::vector<int> unit_of_activations(static_cast<size_t>(N), -1), unit_of_backward(static_cast<size_t>(N), -1);
  for (int i = 0; i < n; ++i) {
    unit_of_activations[chain.activations[i]] = i;
    unit_of_backward[chain.backward[i]] = i;
  }
  const auto kept = [&](int stage, int v) { return stage + 1 < N && schedule.S[stage + 1][v] != 0; };
  ChainSchedule out;
  bool backward_started = false;
  for (int t = 0; t < N; ++t) {
    for (int k = 0; k <= t; ++k) {
      if (!schedule.R[t][k]) continue;
      if (const int i = unit_of_backward[k]; i >= 0) {
        backward_started = true;
        out.backward.push_back(ChainOp::backward(i));
        continue;
      }
      const int i = unit_of_activations[k];
      if (i < 0) continue;
      // A forward of the forward phase spans the stages of its nodes: what it keeps is what the stage of its
      // last node hands on. In a backward stage all its nodes run in the one stage.
      const int r = chain.rebuildable[i];
      const int end = backward_started ? t : i + 1 < n ? chain.input[i + 1] : std::max(k, r);
      const int start = chain.backward_start(i);
      const bool read_in_stage = end == t && (schedule.R[t][start] || schedule.R[t][chain.backward[i]]);
      Keep keep = Keep::Nothing;
      if (read_in_stage) {
        keep = Keep::All;
      } else if (kept(end, chain.activations[i])) {
        keep = r >= 0 && !kept(end, r) ? Keep::Selective : Keep::All;
      } else if (kept(end, chain.input[i])) {
        keep = Keep::Input;
      }
      (backward_started ? out.backward : out.forward).push_back(ChainOp::forward(i, keep));
    }
  }
  if (static_cast<int>(out.forward.size()) != n) return std::nullopt;
  for (int i = 0; i < n; ++i) {
    if (out.forward[i].unit != i) return std::nullopt;
  }
  return out;
}

const char* chain_plan_source_name(ChainPlanSource source) {
  switch (source) {
    case ChainPlanSource::Solved: return "solved";
    case ChainPlanSource::Cached: return "cached";
    case ChainPlanSource::Fallback: return "fallback to optimal";
  }
  return "?";
}

namespace {

// chain.h's peak of a translated schedule, or -1 when chain.h does not run it.
int64_t chain_peak(std::span<const ChainUnit> units, const ChainSchedule& schedule) {
  try {
    return simulate(units, schedule).peak_bytes;
  } catch (const Error&) {
    return -1;
  }
}

}  // namespace

ChainCheckmate checkmate_chain_schedule(std::span<const ChainUnit> units, int64_t budget_bytes,
                                        const ChainCheckmateOptions& options) {
  const ChainGraph chain = chain_training_graph(units);
  ChainCheckmate out;
  const auto fits = [&](const ChainSchedule& s) {
    const int64_t peak = chain_peak(units, s);
    return peak >= 0 && peak <= budget_bytes;
  };
  std::filesystem::path cache;
  if (!options.cache_dir.empty()) {
    std::filesystem::create_directories(options.cache_dir);
    cache = options.cache_dir / fmt::format("checkmate-{}-{}.json", graph_fingerprint(chain.graph), budget_bytes);
    out.cache_file = cache.string();
    std::optional<Solution> cached;
    try {
      cached = load_solution(cache, chain.graph, budget_bytes);
    } catch (const Error& e) {
      // A damaged cache costs a solve, not the run: the solve below writes the file anew.
      out.cache_note = e.what();
    }
    if (cached) {
      if (std::optional<ChainSchedule> s = chain_schedule(chain, cached->schedule); s && fits(*s)) {
        out.found = true;
        out.schedule = std::move(*s);
        out.source = ChainPlanSource::Cached;
        out.status = cached->status;
        return out;
      }
    }
  }
  const int64_t rotor_least = memory::minimum_budget(units);
  SolveOptions solve;
  solve.time_limit_s = options.time_limit_s;
  solve.constraints = chain_constraints(chain);
  if (budget_bytes >= rotor_least) {
    solve.start = checkmate_schedule(chain, units, optimal_schedule(units, budget_bytes));
  }
  // A translated schedule can peak above the solver's: chain.h holds a unit's output until the unit above
  // consumes it even where the pruned schedule no longer keeps it. Lower the bound by the excess and solve again.
  int64_t bound = budget_bytes;
  for (int attempt = 0; attempt < 3 && bound >= 0; ++attempt) {
    const Solution solution = solve_milp(chain.graph, bound, solve);
    out.solve_seconds += solution.solve_seconds;
    out.status = solution.status;
    if (!solution.has_schedule()) break;
    std::optional<ChainSchedule> s = chain_schedule(chain, solution.schedule);
    if (!s) break;
    const int64_t peak = chain_peak(units, *s);
    if (peak < 0) break;
    if (peak <= budget_bytes) {
      if (!cache.empty()) save_solution(cache, chain.graph, budget_bytes, solution);
      out.found = true;
      out.schedule = std::move(*s);
      out.source = ChainPlanSource::Solved;
      return out;
    }
    bound -= peak - budget_bytes;
  }
  if (budget_bytes >= rotor_least) {
    out.found = true;
    out.schedule = optimal_schedule(units, budget_bytes);
    out.source = ChainPlanSource::Fallback;
    return out;
  }
  out.least_budget = rotor_least;
  return out;
}

}  // namespace tessera::memory::remat
