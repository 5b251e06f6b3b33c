#include "memory/remat/milp.h"

#include <coin/Cbc_C_Interface.h>
#include <coin/Clp_C_Interface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "core/check.h"

namespace tessera::memory::remat {

const char* solve_status_name(SolveStatus status) {
  switch (status) {
    case SolveStatus::Optimal:
      return "optimal";
    case SolveStatus::Feasible:
      return "feasible";
    case SolveStatus::Rounded:
      return "rounded";
    case SolveStatus::Infeasible:
      return "infeasible";
    case SolveStatus::NoSchedule:
      return "no_schedule";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A linear program in the row form the problem is written in, handed to COIN in column form.
struct LinearProgram {
  std::vector<double> col_lo, col_hi, obj;
  std::vector<int> integers;
  std::vector<std::vector<std::pair<int, double>>> rows;
  std::vector<double> row_lo, row_hi;

  int var(double lo, double hi, double objective, bool integer) {
    col_lo.push_back(lo);
    col_hi.push_back(hi);
    obj.push_back(objective);
    const int j = static_cast<int>(obj.size()) - 1;
    if (integer)
      integers.push_back(j);
    return j;
  }
  void row(std::vector<std::pair<int, double>> terms, double lo, double hi) {
    rows.push_back(std::move(terms));
    row_lo.push_back(lo);
    row_hi.push_back(hi);
  }
  int cols() const { return static_cast<int>(obj.size()); }

  struct Csc {
    std::vector<CoinBigIndex> start;
    std::vector<int> index;
    std::vector<double> value;
  };
  Csc csc() const {
    Csc m;
    std::vector<CoinBigIndex> count(static_cast<size_t>(cols()) + 1, 0);
    for (const auto& r : rows) {
      for (const auto& [j, v] : r)
        ++count[static_cast<size_t>(j) + 1];
    }
    std::partial_sum(count.begin(), count.end(), count.begin());
    m.start = count;
    m.index.resize(static_cast<size_t>(count.back()));
    m.value.resize(static_cast<size_t>(count.back()));
    auto fill = count;
    for (size_t i = 0; i < rows.size(); ++i) {
      for (const auto& [j, v] : rows[i]) {
        const auto at = static_cast<size_t>(fill[static_cast<size_t>(j)]++);
        m.index[at] = static_cast<int>(i);
        m.value[at] = v;
      }
    }
    return m;
  }
};

enum class Objective : std::uint8_t { Cost, Peak };

// The variables of Checkmate's program, by stage and node (-1 where none exists).
struct Formulation {
  const Graph& graph;
  LinearProgram lp;
  std::vector<std::vector<int>> R, S;
  int peak = -1;  // Objective::Peak only
  struct Free {
    int t, i, k, var;
  };
  std::vector<Free> frees;
};

// Bytes in the program's units: divided by the gcd of the sizes, so the U are small integers, and further
// when even those would be large enough to strain the solver's tolerances.
struct MemoryScale {
  int64_t gcd = 1;
  double extra = 1;
  double bytes(int64_t b) const { return static_cast<double>(b / gcd) / extra; }
  // A budget in the same units: U is a multiple of gcd, so flooring loses nothing.
  double budget(int64_t b) const { return static_cast<double>(b / gcd) / extra; }
};

MemoryScale memory_scale(const Graph& graph) {
  MemoryScale s;
  int64_t g = 0, total = 0;
  for (const auto& node : graph.nodes) {
    g = std::gcd(g, node.bytes);
    total += node.bytes;
  }
  s.gcd = std::max<int64_t>(g, 1);
  const double units = static_cast<double>(total / s.gcd);
  constexpr double kMaxUnits = 1e7;
  if (units > kMaxUnits)
    s.extra = units / kMaxUnits;
  return s;
}

Formulation formulate(const Graph& graph, const MemoryScale& scale, std::optional<int64_t> budget,
                      Objective objective, std::span<const ScheduleConstraint> constraints) {
  const int n = graph.size();
  const auto users = graph_users(graph);
  Formulation f{graph, {}, {}, {}, -1, {}};
  auto& lp = f.lp;
  double total = 0;
  for (const auto& node : graph.nodes)
    total += scale.bytes(node.bytes);
  const double u_max = budget ? scale.budget(*budget) : total;
  f.R.assign(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(n), -1));
  f.S = f.R;
  std::vector<std::vector<int>> U = f.R;
  const bool by_cost = objective == Objective::Cost;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i <= t; ++i) {
      const double c = by_cost ? graph.nodes[i].cost : 0.0;
      f.R[t][i] = lp.var(i == t ? 1 : 0, 1, c, true);
      if (i < t)
        f.S[t][i] = lp.var(0, 1, 0, true);
      U[t][i] = lp.var(0, u_max, 0, false);
    }
  }
  if (!by_cost)
    f.peak = lp.var(0, total, 1, false);
  const auto R = [&](int t, int i) { return f.R[t][i]; };
  const auto S = [&](int t, int i) { return f.S[t][i]; };  // -1 when i >= t
  for (int t = 0; t < n; ++t) {
    for (int k = 0; k <= t; ++k) {
      for (int j : graph.nodes[k].inputs) {
        // R[t][k] <= R[t][j] + S[t][j]
        std::vector<std::pair<int, double>> terms = {{R(t, k), 1}, {R(t, j), -1}};
        if (S(t, j) >= 0)
          terms.push_back({S(t, j), -1});
        lp.row(std::move(terms), -1e30, 0);
      }
      if (k < t)
        lp.row({{R(t, k), 1}, {S(t, k), 1}}, -1e30, 1);
      if (t + 1 < n) {
        // S[t+1][k] <= R[t][k] + S[t][k]
        std::vector<std::pair<int, double>> terms = {{S(t + 1, k), 1}, {R(t, k), -1}};
        if (S(t, k) >= 0)
          terms.push_back({S(t, k), -1});
        lp.row(std::move(terms), -1e30, 0);
      }
    }
    // The memory recurrence. prev_free holds FREE[t][i][k-1] with bytes_i, for U[t][k].
    std::vector<std::pair<int, double>> prev_free;
    for (int k = 0; k <= t; ++k) {
      std::vector<std::pair<int, double>> terms = {{U[t][k], 1}, {R(t, k), -scale.bytes(graph.nodes[k].bytes)}};
      if (k == 0) {
        for (int i = 0; i < t; ++i)
          terms.push_back({S(t, i), -scale.bytes(graph.nodes[i].bytes)});
      } else {
        terms.push_back({U[t][k - 1], -1});
        for (const auto& [var, b] : prev_free)
          terms.push_back({var, b});
      }
      lp.row(std::move(terms), 0, 0);
      if (f.peak >= 0)
        lp.row({{U[t][k], 1}, {f.peak, -1}}, -1e30, 0);
      prev_free.clear();
      if (k == t)
        break;  // frees after the stage's last node change nothing the budget sees
      std::vector<int> freeable = graph.nodes[k].inputs;
      freeable.push_back(k);
      for (int i : freeable) {
        const int free = lp.var(0, 1, 0, true);
        // hazards h = (1 - R[t][k]) + S[t+1][i] + sum of R[t][j] over readers j of i after k
        std::vector<std::pair<int, double>> h = {{R(t, k), -1}};
        double terms_count = 1;
        if (t + 1 < n) {
          h.push_back({S(t + 1, i), 1});
          ++terms_count;
        }
        for (int j : users[i]) {
          if (j > k && j <= t) {
            h.push_back({R(t, j), 1});
            ++terms_count;
          }
        }
        // FREE + h >= 1, i.e. FREE + h' >= 0 with h' = h - 1 (the constant of h moved right)
        auto lower = h;
        lower.push_back({free, 1});
        lp.row(std::move(lower), 0, 1e30);
        // kappa FREE + h <= kappa, i.e. kappa FREE + h' <= kappa - 1
        auto upper = h;
        upper.push_back({free, terms_count});
        lp.row(std::move(upper), -1e30, terms_count - 1);
        prev_free.push_back({free, scale.bytes(graph.nodes[i].bytes)});
        f.frees.push_back({t, i, k, free});
      }
    }
  }
  for (const ScheduleConstraint& c : constraints) {
    std::vector<std::pair<int, double>> terms;
    for (const ScheduleTerm& term : c.terms) {
      TS_CHECK(term.stage >= 0 && term.stage < n && term.node >= 0 && term.node < n,
               "a schedule constraint names stage {} and node {} of a {}-node graph", term.stage, term.node, n);
      const auto& matrix = term.matrix == ScheduleTerm::Matrix::R ? f.R : f.S;
      const int var = matrix[term.stage][term.node];
      if (var >= 0)
        terms.push_back({var, term.coefficient});
    }
    lp.row(std::move(terms), c.lo, c.hi);
  }
  return f;
}

Schedule read_schedule(const Formulation& f, const double* x, int n) {
  Schedule s;
  s.R.assign(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  s.S = s.R;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i <= t; ++i) {
      s.R[t][i] = x[f.R[t][i]] > 0.5;
      if (i < t)
        s.S[t][i] = x[f.S[t][i]] > 0.5;
    }
  }
  return s;
}

struct MilpResult {
  enum class Kind : std::uint8_t { Optimal, Feasible, Infeasible, Nothing } kind = Kind::Nothing;
  Schedule schedule;  // pruned
  double objective = 0;
};

// The integer variables' values for a schedule, for CBC to start from: FREE follows from R and S by the
// simulator's rule, and CBC finds the U.
std::pair<std::vector<int>, std::vector<double>> start_values(const Formulation& f, const Schedule& s) {
  const int n = f.graph.size();
  const auto users = graph_users(f.graph);
  std::vector<int> cols;
  std::vector<double> values;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i <= t; ++i) {
      cols.push_back(f.R[t][i]);
      values.push_back(s.R[t][i]);
      if (i < t) {
        cols.push_back(f.S[t][i]);
        values.push_back(s.S[t][i]);
      }
    }
  }
  for (const auto& fr : f.frees) {
    bool free = s.R[fr.t][fr.k] && !(fr.t + 1 < n && s.S[fr.t + 1][fr.i]);
    for (int j : users[fr.i])
      free = free && !(j > fr.k && j <= fr.t && s.R[fr.t][j]);
    cols.push_back(fr.var);
    values.push_back(free ? 1.0 : 0.0);
  }
  return {cols, values};
}

MilpResult run_cbc(const Formulation& f, int n, double time_limit_s, const Schedule* start = nullptr) {
  const auto& lp = f.lp;
  const auto m = lp.csc();
  std::unique_ptr<Cbc_Model, decltype(&Cbc_deleteModel)> model(Cbc_newModel(), &Cbc_deleteModel);
  Cbc_loadProblem(model.get(), lp.cols(), static_cast<int>(lp.rows.size()), m.start.data(), m.index.data(),
                  m.value.data(), lp.col_lo.data(), lp.col_hi.data(), lp.obj.data(), lp.row_lo.data(),
                  lp.row_hi.data());
  for (int j : lp.integers)
    Cbc_setInteger(model.get(), j);
  if (start != nullptr) {
    const auto [cols, values] = start_values(f, *start);
    Cbc_setMIPStartI(model.get(), static_cast<int>(cols.size()), cols.data(), values.data());
  }
  Cbc_setLogLevel(model.get(), 0);
  Cbc_setMaximumSeconds(model.get(), time_limit_s);
  // A proof of optimality, not CBC's default relative gap: the tests compare costs exactly.
  Cbc_setAllowableFractionGap(model.get(), 0);
  Cbc_setAllowableGap(model.get(), 1e-9);
  Cbc_solve(model.get());
  MilpResult r;
  const double* x = Cbc_bestSolution(model.get());
  if (x != nullptr) {
    r.schedule = prune_schedule(f.graph, read_schedule(f, x, n));
    r.objective = Cbc_getObjValue(model.get());
    r.kind = Cbc_isProvenOptimal(model.get()) ? MilpResult::Kind::Optimal : MilpResult::Kind::Feasible;
  } else if (Cbc_isProvenInfeasible(model.get())) {
    r.kind = MilpResult::Kind::Infeasible;
  }
  return r;
}

// The LP relaxation's S, or nullopt when the relaxation is infeasible.
std::optional<std::vector<std::vector<double>>> relaxed_s(const Formulation& f, int n) {
  const auto& lp = f.lp;
  const auto m = lp.csc();
  std::unique_ptr<Clp_Simplex, decltype(&Clp_deleteModel)> model(Clp_newModel(), &Clp_deleteModel);
  Clp_loadProblem(model.get(), lp.cols(), static_cast<int>(lp.rows.size()), m.start.data(), m.index.data(),
                  m.value.data(), lp.col_lo.data(), lp.col_hi.data(), lp.obj.data(), lp.row_lo.data(),
                  lp.row_hi.data());
  Clp_setLogLevel(model.get(), 0);
  Clp_initialSolve(model.get());
  if (Clp_isProvenPrimalInfeasible(model.get()))
    return std::nullopt;
  TS_CHECK(Clp_isProvenOptimal(model.get()),
           "the LP relaxation of the rematerialization program did not solve "
           "(Clp status {})",
           Clp_status(model.get()));
  const double* x = Clp_getColSolution(model.get());
  std::vector<std::vector<double>> s(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < t; ++i)
      s[t][i] = std::clamp(x[f.S[t][i]], 0.0, 1.0);
  }
  return s;
}

// The schedule simulated; nullopt when it exceeds the budget.
std::optional<Solution> fitted(const Graph& graph, Schedule schedule, int64_t budget) {
  Solution out;
  out.schedule = std::move(schedule);
  const auto sim = simulate_schedule(graph, out.schedule);
  if (sim.peak_bytes > budget)
    return std::nullopt;
  out.cost = sim.cost;
  out.peak_bytes = sim.peak_bytes;
  return out;
}

Solution rounding(const Graph& graph, int64_t budget, const SolveOptions& options, const MemoryScale& scale) {
  const int n = graph.size();
  Solution out;
  const auto s_lp = relaxed_s(formulate(graph, scale, budget, Objective::Cost, options.constraints), n);
  if (!s_lp) {
    out.status = SolveStatus::Infeasible;
    return out;
  }
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::optional<Solution> best;
  for (int attempt = 0; attempt <= std::max(0, options.rounding_tries); ++attempt) {
    BoolMatrix s(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < t; ++i) {
        const double p = (*s_lp)[t][i];
        s[t][i] = attempt == 0 ? p >= 0.5 : uniform(rng) < p;
      }
    }
    Schedule rounded = minimal_recompute(graph, s);
    if (!meets(rounded, options.constraints))
      continue;
    auto candidate = fitted(graph, prune_schedule(graph, rounded), budget);
    if (candidate && (!best || candidate->cost < best->cost))
      best = std::move(candidate);
  }
  if (best) {
    out = std::move(*best);
    out.status = SolveStatus::Rounded;
  }
  return out;
}

// The caller's start when it fits the budget and meets the constraints, else keeping everything when that
// does.
std::optional<Schedule> starting_schedule(const Graph& graph, int64_t budget, const SolveOptions& options) {
  const auto usable = [&](const Schedule& s) {
    return meets(s, options.constraints) && simulate_schedule(graph, s).peak_bytes <= budget;
  };
  if (options.start && usable(*options.start))
    return options.start;
  Schedule everything = keep_everything_schedule(graph);
  if (usable(everything))
    return everything;
  return std::nullopt;
}

}  // namespace

bool meets(const Schedule& schedule, std::span<const ScheduleConstraint> constraints) {
  const int n = static_cast<int>(schedule.R.size());
  for (const ScheduleConstraint& c : constraints) {
    double sum = 0;
    for (const ScheduleTerm& term : c.terms) {
      const bool exists = term.matrix == ScheduleTerm::Matrix::R ? term.node <= term.stage : term.node < term.stage;
      if (!exists || term.stage >= n)
        continue;
      const auto& matrix = term.matrix == ScheduleTerm::Matrix::R ? schedule.R : schedule.S;
      sum += term.coefficient * matrix[term.stage][term.node];
    }
    if (sum < c.lo - 1e-9 || sum > c.hi + 1e-9)
      return false;
  }
  return true;
}

Solution round_lp_relaxation(const Graph& graph, int64_t budget_bytes, const SolveOptions& options) {
  check_graph(graph);
  const auto start = Clock::now();
  auto out = rounding(graph, budget_bytes, options, memory_scale(graph));
  out.solve_seconds = seconds_since(start);
  return out;
}

Solution solve_milp(const Graph& graph, int64_t budget_bytes, const SolveOptions& options) {
  check_graph(graph);
  const auto start = Clock::now();
  const int n = graph.size();
  const auto scale = memory_scale(graph);
  Solution out;
  if (budget_bytes < 0) {
    out.status = SolveStatus::Infeasible;
    return out;
  }
  if (options.time_limit_s > 0) {
    // The caller's schedule or keeping everything, when it fits, is a schedule CBC can start from: without one
    // CBC may find no integer solution at all in its time on a graph of a hundred nodes.
    const std::optional<Schedule> first = starting_schedule(graph, budget_bytes, options);
    // The solver's tolerances may, with large scaled sizes, admit a schedule a few bytes over the budget; the
    // exact simulation catches it and the bound is lowered by the excess.
    int64_t bound = budget_bytes;
    for (int attempt = 0; attempt < 3 && bound >= 0; ++attempt) {
      const double left = options.time_limit_s - seconds_since(start);
      if (left <= 0)
        break;
      const auto r = run_cbc(formulate(graph, scale, bound, Objective::Cost, options.constraints), n, left,
                             first ? &*first : nullptr);
      if (r.kind == MilpResult::Kind::Infeasible) {
        out.status = SolveStatus::Infeasible;
        out.solve_seconds = seconds_since(start);
        return out;
      }
      if (r.kind == MilpResult::Kind::Nothing)
        break;
      const auto sim = simulate_schedule(graph, r.schedule);
      if (sim.peak_bytes > budget_bytes) {
        bound -= sim.peak_bytes - budget_bytes;
        continue;
      }
      out = *fitted(graph, r.schedule, budget_bytes);
      out.status = r.kind == MilpResult::Kind::Optimal ? SolveStatus::Optimal : SolveStatus::Feasible;
      out.solve_seconds = seconds_since(start);
      return out;
    }
  }
  out = rounding(graph, budget_bytes, options, scale);
  out.solve_seconds = seconds_since(start);
  return out;
}

MinimumBudget minimum_budget(const Graph& graph, const SolveOptions& options) {
  check_graph(graph);
  const int n = graph.size();
  const auto scale = memory_scale(graph);
  MinimumBudget out;
  const auto everything = keep_everything_schedule(graph);
  const std::optional<Schedule> start =
      options.start ? options.start : meets(everything, options.constraints) ? std::optional(everything) : std::nullopt;
  const auto r = run_cbc(formulate(graph, scale, std::nullopt, Objective::Peak, options.constraints), n,
                         std::max(options.time_limit_s, 1.0), start ? &*start : nullptr);
  if (r.kind == MilpResult::Kind::Optimal || r.kind == MilpResult::Kind::Feasible) {
    out.bytes = simulate_schedule(graph, r.schedule).peak_bytes;
    // Proven when the exact peak is what the solver proved least (up to its scaled units).
    out.proven = r.kind == MilpResult::Kind::Optimal;
  } else {
    // Without a solution in time, the starting schedule's peak is a bound.
    out.bytes = simulate_schedule(graph, start ? *start : everything).peak_bytes;
  }
  return out;
}

Solution plan_rematerialization(const Graph& graph, int64_t budget_bytes, const SolveOptions& options) {
  auto out = solve_milp(graph, budget_bytes, options);
  if (out.status == SolveStatus::Infeasible) {
    const auto least = minimum_budget(graph, options);
    TS_FAIL(
        "no rematerialization schedule of this {}-node graph fits {} "
        "bytes; the smallest budget that works is "
        "{}{} bytes",
        graph.size(), budget_bytes, least.proven ? "" : "at most ", least.bytes);
  }
  TS_CHECK(out.has_schedule(),
           "no rematerialization schedule of this {}-node graph within {} "
           "bytes was found in {} s (nor by rounding "
           "the LP relaxation); raise the time limit or the budget",
           graph.size(), budget_bytes, options.time_limit_s);
  return out;
}

}  // namespace tessera::memory::remat
