#include "memory/optimal.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "memory/recompute_policy.h"

namespace tessera::memory {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// Slots of the automatic quantum: 2000 keeps the rounding loss near 0.05% of none's peak; chains
// past ~140 units get fewer so that the n^2/2 tables stay under 160 MB (half that in practice,
// since a segment's table stops where keeping everything fits).
int64_t automatic_slots(int n) {
  const int64_t pairs = static_cast<int64_t>(n) * (n + 1) / 2;
  return std::clamp<int64_t>(20'000'000 / pairs, 256, 2000);
}
// An explicit quantum may ask for finer tables, up to ~400 MB.
constexpr int64_t kMaxCells = 50'000'000;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The best of every simple policy at its exact peak, with the candidate peaks it saw.
struct SimpleBest {
  ChainSchedule schedule;
  double time = kInf;
  int64_t least_peak = kNoLimit;  // the lowest peak of any simple policy
};

SimpleBest best_simple_policy(std::span<const ChainUnit> units, int64_t budget) {
  const int n = static_cast<int>(units.size());
  SimpleBest best;
  auto consider = [&](ChainSchedule s) {
    const ChainSimulation sim = simulate(units, s);
    best.least_peak = std::min(best.least_peak, sim.peak_bytes);
    if (sim.peak_bytes <= budget && sim.time < best.time) {
      best.time = sim.time;
      best.schedule = std::move(s);
    }
  };
  consider(none_schedule(n));
  for (int k = 1; k < n - 1; ++k) consider(every_k_schedule(n, k));
  if (n > 1) consider(every_k_schedule(n, n - 1));  // one segment: every larger k is the same schedule
  return best;
}

// The DP over segments (optimal.h), in slots of q bytes. Every size is rounded up, so a peak the
// DP computes bounds the exact one from above.
class SegmentSolver {
 public:
  SegmentSolver(std::span<const ChainUnit> units, int64_t quantum) : units_(units), n_(static_cast<int>(units.size())) {
    for (const ChainUnit& u : units) {
      in_.push_back(ceil_div(u.input_bytes, quantum));
      own_.push_back(ceil_div(u.own_bytes, quantum));
      // What a forward allocates: its output, and anything it frees again before it ends.
      out_.push_back(ceil_div(u.output_bytes, quantum) + ceil_div(u.forward_extra_bytes, quantum));
      bwd_.push_back(ceil_div(u.backward_extra_bytes, quantum));
    }
    fwd_prefix_.assign(n_ + 1, 0.0);
    for (int i = 0; i < n_; ++i) fwd_prefix_[i + 1] = fwd_prefix_[i] + units[i].forward_time;
    bounds_.assign(static_cast<std::size_t>(n_) * n_, {});
    compute_bounds();
  }

  // Slots of x_0, held by the caller throughout.
  int64_t base_slots() const { return in_[0]; }
  // The least extra slots any DP schedule of the whole chain needs.
  int64_t least_slots() const { return bound(0, n_ - 1).lo; }

  // Fills the tables for budgets up to `slots` extra slots; then schedule() can run.
  void solve(int64_t slots) {
    slots_ = slots;
    tables_.assign(static_cast<std::size_t>(n_) * n_, {});
    for (int len = 1; len <= n_; ++len)
      for (int s = 0; s + len <= n_; ++s) fill(s, s + len - 1);
  }

  ChainSchedule schedule() const {
    TS_CHECK(slots_ >= least_slots(), "internal: optimal schedule asked for {} slots below the least {}", slots_,
             least_slots());
    std::vector<ChainOp> ops;
    emit(0, n_ - 1, slots_, ops);
    // The forward phase is everything before the first backward: the DP always starts a segment
    // with its first unit and recurses into the right part first, so that is the plain forward pass.
    ChainSchedule s;
    const auto first_backward =
        std::find_if(ops.begin(), ops.end(), [](const ChainOp& op) { return !op.is_forward(); });
    s.forward.assign(ops.begin(), first_backward);
    s.backward.assign(first_backward, ops.end());
    return s;
  }

 private:
  struct Bound {
    int64_t lo = 0;  // least extra slots of any schedule of the segment the DP considers
    int64_t hi = 0;  // the extra slots of keeping everything: from there on, no recomputation is needed
  };
  struct Table {
    int64_t lo = 0, cap = -1;  // time[m - lo] for m in [lo, cap]; past cap the time no longer falls
    std::vector<double> time;
    bool empty() const { return cap < lo; }
    double at(int64_t m) const { return time[std::min(m, cap) - lo]; }
  };

  std::size_t key(int s, int t) const { return static_cast<std::size_t>(s) * n_ + t; }
  const Bound& bound(int s, int t) const { return bounds_[key(s, t)]; }
  const Table& table(int s, int t) const { return tables_[key(s, t)]; }

  // The peaks of choice A at unit s, apart from the sub-segment's.
  int64_t a_own_peak(int s) const { return std::max(own_[s] + out_[s], own_[s] + bwd_[s]); }
  int64_t a_offset(int s) const { return own_[s] + in_[s + 1]; }
  double a_time(int s) const { return units_[s].forward_time + units_[s].backward_time; }
  // The forward run of choice B, units s..s'-1 ending with x_{s'} stored. Its peak never binds
  // (the left part opt(s, s'-1) later runs the same forwards with x_k and x_s present too), but
  // each choice states its own peaks so that the DP reads like the rules.
  double b_time(int s, int s2) const { return fwd_prefix_[s2] - fwd_prefix_[s]; }
  int64_t b_run_step(int s, int k) const { return (k > s ? in_[k] : 0) + own_[k] + out_[k]; }

  void compute_bounds() {
    for (int len = 1; len <= n_; ++len)
      for (int s = 0; s + len <= n_; ++s) {
        const int t = s + len - 1;
        Bound& b = bounds_[key(s, t)];
        b.hi = a_own_peak(s);
        if (t > s) b.hi = std::max(b.hi, a_offset(s) + bound(s + 1, t).hi);
        b.lo = t > s ? std::max(a_own_peak(s), a_offset(s) + bound(s + 1, t).lo) : b.hi;
        int64_t run = 0;
        for (int s2 = s + 1; s2 <= t; ++s2) {
          run = std::max(run, b_run_step(s, s2 - 1));
          b.lo = std::min(b.lo, std::max({run, in_[s2] + bound(s2, t).lo, bound(s, s2 - 1).lo}));
        }
      }
  }

  // best[m] = min(best[m], f + r(m) + l(m)) over m in [from, to]; r and l either walk their table
  // or stay at its last entry, so the loop is a straight vectorisable min.
  template <bool kWalkR, bool kWalkL>
  static void relax_run(double* best, int64_t count, double f, const double* r, const double* l) {
    for (int64_t j = 0; j < count; ++j) best[j] = std::min(best[j], f + r[kWalkR ? j : 0] + l[kWalkL ? j : 0]);
  }

  // Relaxes the table of (s, t) over [from, to] with f + R(m - shift) + L(m); a missing R or L
  // adds 0. Splits the range where R or L pass their cap and become constant.
  void relax(Table& T, int64_t from, int64_t to, double f, const Table* R, int64_t shift, const Table* L) const {
    static constexpr double kZero = 0.0;
    const int64_t r_end = R ? R->cap + shift : kNoLimit;  // last m at which R still walks
    const int64_t l_end = L ? L->cap : kNoLimit;
    auto r_ptr = [&](int64_t m) { return R ? &R->time[std::min(m - shift, R->cap) - R->lo] : &kZero; };
    auto l_ptr = [&](int64_t m) { return L ? &L->time[std::min(m, L->cap) - L->lo] : &kZero; };
    int64_t m = from;
    while (m <= to) {
      const bool walk_r = R && m <= r_end, walk_l = L && m <= l_end;
      int64_t last = to;
      if (walk_r) last = std::min(last, r_end);
      if (walk_l) last = std::min(last, l_end);
      double* best = &T.time[m - T.lo];
      const int64_t count = last - m + 1;
      if (walk_r && walk_l) relax_run<true, true>(best, count, f, r_ptr(m), l_ptr(m));
      else if (walk_r) relax_run<true, false>(best, count, f, r_ptr(m), l_ptr(m));
      else if (walk_l) relax_run<false, true>(best, count, f, r_ptr(m), l_ptr(m));
      else relax_run<false, false>(best, count, f, r_ptr(m), l_ptr(m));
      m = last + 1;
    }
  }

  void fill(int s, int t) {
    Table& T = tables_[key(s, t)];
    const Bound& b = bound(s, t);
    T.lo = b.lo;
    T.cap = std::min(b.hi, slots_);
    if (T.empty()) return;  // needs more than the budget
    T.time.assign(T.cap - T.lo + 1, kInf);
    if (t == s) {
      relax(T, a_own_peak(s), T.cap, a_time(s), nullptr, 0, nullptr);
    } else if (const Table& R = table(s + 1, t); !R.empty()) {
      relax(T, std::max(a_own_peak(s), a_offset(s) + R.lo), T.cap, a_time(s), &R, a_offset(s), nullptr);
    }
    int64_t run = 0;
    for (int s2 = s + 1; s2 <= t; ++s2) {
      run = std::max(run, b_run_step(s, s2 - 1));
      const Table& R = table(s2, t);
      const Table& L = table(s, s2 - 1);
      if (R.empty() || L.empty()) continue;
      relax(T, std::max({run, in_[s2] + R.lo, L.lo}), T.cap, b_time(s, s2), &R, in_[s2], &L);
    }
  }

  // Rebuilds the schedule of (s, t) with m extra slots: the first choice whose value, computed as
  // in relax(), equals the table's. Every sum is the same IEEE sum in the same order, so the
  // equality is exact.
  void emit(int s, int t, int64_t m, std::vector<ChainOp>& ops) const {
    const Table& T = table(s, t);
    TS_CHECK(!T.empty() && m >= T.lo, "internal: optimal schedule reached segment {}..{} with {} slots, below its {}",
             s, t, m, T.lo);
    m = std::min(m, T.cap);
    const double target = T.at(m);
    if (t == s) {
      ops.push_back(ChainOp::forward(s, Keep::All));
      ops.push_back(ChainOp::backward(s));
      return;
    }
    if (const Table& R = table(s + 1, t); !R.empty() && m >= std::max(a_own_peak(s), a_offset(s) + R.lo) &&
                                          a_time(s) + R.at(m - a_offset(s)) + 0.0 == target) {
      ops.push_back(ChainOp::forward(s, Keep::All));
      emit(s + 1, t, m - a_offset(s), ops);
      ops.push_back(ChainOp::backward(s));
      return;
    }
    int64_t run = 0;
    for (int s2 = s + 1; s2 <= t; ++s2) {
      run = std::max(run, b_run_step(s, s2 - 1));
      const Table& R = table(s2, t);
      const Table& L = table(s, s2 - 1);
      if (R.empty() || L.empty() || m < std::max({run, in_[s2] + R.lo, L.lo})) continue;
      if (b_time(s, s2) + R.at(m - in_[s2]) + L.at(m) != target) continue;
      ops.push_back(ChainOp::forward(s, Keep::Input));
      for (int k = s + 1; k < s2; ++k) ops.push_back(ChainOp::forward(k, Keep::Nothing));
      emit(s2, t, m - in_[s2], ops);
      emit(s, s2 - 1, m, ops);
      return;
    }
    TS_FAIL("internal: no choice of segment {}..{} reproduces its optimal time {} at {} slots", s, t, target, m);
  }

  std::span<const ChainUnit> units_;
  int n_;
  std::vector<int64_t> in_, own_, out_, bwd_;  // sizes in slots (out_: output + forward extra)
  std::vector<double> fwd_prefix_;             // fwd_prefix_[i]: forward time of units 0..i-1
  std::vector<Bound> bounds_;                  // [s * n + t]
  std::vector<Table> tables_;                  // [s * n + t]
  int64_t slots_ = 0;
};

int64_t resolve_quantum(std::span<const ChainUnit> units, int64_t quantum) {
  TS_CHECK(quantum >= 0, "the memory quantum of the optimal recompute solver is {} bytes; pass a positive "
           "quantum, or 0 to choose it automatically", quantum);
  return quantum > 0 ? quantum : optimal_quantum(units);
}

// The least budget of the DP at quantum q and of the simple policies at their exact peaks.
int64_t least_budget(const SegmentSolver& solver, int64_t quantum, const SimpleBest& simple) {
  return std::min(quantum * (solver.base_slots() + solver.least_slots()), simple.least_peak);
}

}  // namespace

int64_t optimal_quantum(std::span<const ChainUnit> units) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  const int64_t none_peak = simulate(units, none_schedule(n)).peak_bytes;
  return std::max<int64_t>(1, ceil_div(none_peak, automatic_slots(n)));
}

int64_t minimum_budget(std::span<const ChainUnit> units, int64_t quantum) {
  check_chain(units);
  const int64_t q = resolve_quantum(units, quantum);
  const SegmentSolver solver(units, q);
  return least_budget(solver, q, best_simple_policy(units, 0));
}

ChainSchedule optimal_schedule(std::span<const ChainUnit> units, int64_t budget_bytes, int64_t quantum) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  const int64_t q = resolve_quantum(units, quantum);
  // Nothing is faster than running every unit once: with room for it, there is nothing to solve.
  if (simulate(units, none_schedule(n)).peak_bytes <= budget_bytes) return none_schedule(n);

  SimpleBest simple = best_simple_policy(units, budget_bytes);
  SegmentSolver solver(units, q);
  const int64_t slots = budget_bytes / q - solver.base_slots();
  const int64_t least = least_budget(solver, q, simple);
  TS_CHECK(budget_bytes >= least,
           "an activation budget of {} bytes is below the minimum {} bytes this chain of {} units needs, even "
           "recomputing as much as possible; raise the budget to at least {} bytes, or cut the model into "
           "smaller units or microbatches",
           budget_bytes, least, n, least);

  ChainSchedule best = std::move(simple.schedule);
  double best_time = simple.time;
  if (slots >= solver.least_slots()) {
    const int64_t pairs = static_cast<int64_t>(n) * (n + 1) / 2;
    TS_CHECK(pairs * (slots + 1) <= kMaxCells,
             "the optimal recompute solver would need {} slots for each of {} segments with a quantum of {} bytes, "
             "more than the {} table cells it allows; pass a larger quantum, or 0 to choose it automatically",
             slots, pairs, q, kMaxCells);
    solver.solve(slots);
    ChainSchedule dp = solver.schedule();
    const ChainSimulation sim = simulate(units, dp);
    TS_CHECK(sim.peak_bytes <= budget_bytes,
             "internal: the optimal recompute schedule peaks at {} bytes, above its budget of {} bytes (quantum {})",
             sim.peak_bytes, budget_bytes, q);
    // The DP searches a superset of the simple policies: with no rounding it can only tie them.
    if (sim.time <= best_time) {
      best = std::move(dp);
      best_time = sim.time;
    }
  }
  TS_CHECK(best_time < kInf, "internal: no recompute schedule found for a budget of {} bytes above the minimum {}",
           budget_bytes, least);
  return best;
}

}  // namespace tessera::memory
