#include "memory/dtr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "memory/recompute_policy.h"

namespace tessera::memory {

namespace {

// A tensor of the chain: never produced yet or freed by its backward (Gone), resident, or evicted
// (needed later, to be rematerialized).
enum class State : std::uint8_t { Gone, Resident, Evicted };

// Which tensors the op about to run reads: they may not be evicted to make room for it.
struct Locks {
  int x = -1;  // x_i
  int a = -1;  // A_i
};

class Dtr {
 public:
  Dtr(std::span<const ChainUnit> units, int64_t budget)
      : u_(units), n_(static_cast<int>(units.size())), budget_(budget), b_(n_), x_(units.size() + 1, State::Gone),
        a_(units.size(), State::Gone), r_(units.size(), State::Gone), x_holder_(units.size(), -1),
        a_producer_(units.size(), -1),
        x_used_(units.size(), 0.0), a_used_(units.size(), 0.0) {
    x_[0] = State::Resident;
    live_ = u_[0].input_bytes;
  }

  DtrRun run() {
    DtrRun r;
    for (int i = 0; i < n_ && ok_; ++i) forward(i);
    const int forward_ops = static_cast<int>(ops_.size());
    for (int i = n_ - 1; i >= 0 && ok_; --i) backward(i);
    r.fits = ok_;
    r.failure = failure_;
    r.held_peak = held_peak_;
    r.time = clock_;
    r.evictions = evictions_;
    if (!ok_) return r;
    r.schedule.forward.assign(ops_.begin(), ops_.begin() + forward_ops);
    r.schedule.backward.assign(ops_.begin() + forward_ops, ops_.end());
    for (const ChainOp& op : r.schedule.backward) r.rematerialized_forwards += op.is_forward() ? 1 : 0;
    return r;
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // Forward(i), keeping everything; later evictions lower its keep.
  void forward(int i) {
    if (!ok_) return;
    // chain.h runs no forward over kept activations: drop them, the rerun brings them back.
    if (a_[i] == State::Resident) evict_a(i);
    const ChainUnit& u = u_[i];
    if (!make_room(u.own_bytes + u.output_bytes + u.forward_extra_bytes, {i, -1},
                   fmt::format("forward({}) (own {} + output {} + extra {} bytes)", i, u.own_bytes, u.output_bytes,
                               u.forward_extra_bytes))) {
      return;
    }
    const int op = static_cast<int>(ops_.size());
    ops_.push_back(ChainOp::forward(i, Keep::All));
    x_holder_[i] = a_producer_[i] = op;
    x_used_[i] = a_used_[i] = clock_;
    a_[i] = State::Resident;
    r_[i] = u.rebuildable_bytes > 0 ? State::Resident : State::Gone;
    live_ += u.own_bytes;
    if (i + 1 < b_ && i + 1 < n_) {
      x_[i + 1] = State::Resident;
      x_used_[i + 1] = clock_;
      live_ += u_[i + 1].input_bytes;
    }
    clock_ += u.forward_time;
  }

  // Backward(i), rematerializing A_i (and x_i first, from the nearest resident input) when evicted, or
  // only R_i (the backward's rebuild) when that alone was.
  void backward(int i) {
    if (a_[i] != State::Resident) {
      int k = i;
      while (x_[k] != State::Resident) --k;  // x_0 is pinned, so this stops
      for (int j = k; j <= i && ok_; ++j) forward(j);
      if (!ok_) return;
    }
    const ChainUnit& u = u_[i];
    const bool rebuild = r_[i] == State::Evicted;
    const int64_t need = u.backward_extra_bytes + (rebuild ? u.rebuild_bytes : 0);
    if (!make_room(need, {i, i},
                   fmt::format("backward({}) (extra {} bytes{})", i, u.backward_extra_bytes,
                               rebuild ? fmt::format(", rebuilding {}", u.rebuild_bytes) : std::string()))) {
      return;
    }
    ops_.push_back(ChainOp::backward(i));
    live_ -= resident_activation_bytes(i) + u.input_bytes;
    a_[i] = r_[i] = x_[i] = State::Gone;
    b_ = i;
    clock_ += u.backward_time + (rebuild ? u.rebuild_time : 0);
  }

  // What A_i and R_i hold now.
  int64_t resident_activation_bytes(int i) const {
    return u_[i].own_bytes - (r_[i] == State::Evicted ? u_[i].rebuildable_bytes : 0);
  }

  void evict_a(int i) {
    ops_[a_producer_[i]].keep = Keep::Input;
    live_ -= resident_activation_bytes(i);
    a_[i] = State::Evicted;
    if (r_[i] != State::Gone) r_[i] = State::Evicted;
    ++evictions_;
  }

  // R_i alone: its forward kept all but the rebuildable part, which the backward rebuilds.
  void evict_r(int i) {
    ops_[a_producer_[i]].keep = Keep::Selective;
    r_[i] = State::Evicted;
    live_ -= u_[i].rebuildable_bytes;
    ++evictions_;
  }

  void evict_x(int i) {
    ChainOp& holder = ops_[x_holder_[i]];
    TS_CHECK(holder.keep == Keep::Input, "internal: DTR evicts x_{} while {} keeps its activations", i, describe(holder));
    holder.keep = Keep::Nothing;
    x_[i] = State::Evicted;
    live_ -= u_[i].input_bytes;
    ++evictions_;
  }

  // The compute of the distinct forwards producing t or its evicted neighbourhood (h_DTR^eq's c).
  // Tensors: x_j is produced by forward j-1, read by forward j; A_j produced by forward j.
  double neighbourhood_cost(bool is_a, int i) const {
    std::vector<char> op_counted(u_.size(), 0), x_seen(u_.size() + 1, 0), a_seen(u_.size(), 0);
    std::vector<std::pair<bool, int>> stack{{is_a, i}};
    double cost = 0;
    auto count = [&](int op) {
      if (op >= 0 && !op_counted[op]) {
        op_counted[op] = 1;
        cost += u_[op].forward_time;
      }
    };
    auto visit = [&](bool a, int j) {
      if (j < 0 || j >= n_) return;
      if (a ? (a_seen[j] || a_[j] != State::Evicted) : (x_seen[j] || x_[j] != State::Evicted)) return;
      stack.push_back({a, j});
    };
    if (is_a) a_seen[i] = 1; else x_seen[i] = 1;
    while (!stack.empty()) {
      const auto [a, j] = stack.back();
      stack.pop_back();
      (a ? a_seen : x_seen)[j] = 1;
      if (a) {
        count(j);
        visit(false, j);  // its parent x_j
      } else {
        count(j - 1);
        visit(false, j - 1);  // parent
        visit(false, j + 1);  // children: forward j's outputs
        visit(true, j);
      }
    }
    return cost;
  }

  // x_i's c. Forward(i-1) produced x_i together with A_{i-1}: once A_{i-1} is evicted, the forward
  // that brings it back brings x_i too, and when x_{i-1} is resident that one forward is all the
  // rebuild of x_i runs, so evicting x_i adds no compute (the neighbourhood's sum would charge it
  // forward(i-1), already owed by A_{i-1}, and A_i's own forward). With x_{i-1} evicted as well the
  // rebuild reruns a chain of forwards, each keeping its activations long before their backward
  // needs them; there the neighbourhood's cost stands (free there too, DTR thrashes:
  // docs/rematerialization.md).
  double input_cost(int i) const {
    if (a_[i - 1] == State::Evicted && x_[i - 1] == State::Resident) return 0;
    return neighbourhood_cost(false, i);
  }

  // Evicts by smallest h until `need` more bytes fit; false (and the failure) when they cannot.
  bool make_room(int64_t need, Locks locks, const std::string& what) {
    while (live_ + need > budget_) {
      enum class Kind : std::uint8_t { A, R, X };
      double best_h = kInf;
      int64_t best_m = -1;
      Kind best_kind = Kind::A;
      int best_i = -1;
      // c: the neighbourhood's forwards; R_i's alone is its rebuild, from A_i, which is resident.
      auto consider = [&](Kind kind, int i, int64_t m, double used) {
        if (m <= 0) return;  // frees nothing
        const double s = clock_ - used;
        const double c = kind == Kind::R   ? u_[i].rebuild_time
                         : kind == Kind::X ? input_cost(i)
                                           : neighbourhood_cost(true, i);
        const double h = s > 0 ? c / (static_cast<double>(m) * s) : kInf;
        if (best_i < 0 || h < best_h || (h == best_h && m > best_m)) {
          best_h = h, best_m = m, best_kind = kind, best_i = i;
        }
      };
      for (int i = 0; i < n_; ++i) {
        if (a_[i] != State::Resident || i == locks.a) continue;
        consider(Kind::A, i, resident_activation_bytes(i), a_used_[i]);
        // The loss unit's forward keeps all: its backward comes next.
        if (r_[i] == State::Resident && i + 1 < n_) consider(Kind::R, i, u_[i].rebuildable_bytes, a_used_[i]);
      }
      for (int i = 1; i < n_; ++i) {
        if (x_[i] == State::Resident && a_[i] != State::Resident && i != locks.x && x_holder_[i] >= 0) {
          consider(Kind::X, i, u_[i].input_bytes, x_used_[i]);
        }
      }
      if (best_i < 0) {
        ok_ = false;
        failure_ = fmt::format("{} needs {} bytes beside the {} it must hold, over the budget of {} bytes", what,
                               need, live_, budget_);
        return false;
      }
      switch (best_kind) {
        case Kind::A: evict_a(best_i); break;
        case Kind::R: evict_r(best_i); break;
        case Kind::X: evict_x(best_i); break;
      }
    }
    held_peak_ = std::max(held_peak_, live_ + need);
    return true;
  }

  std::span<const ChainUnit> u_;
  int n_;
  int64_t budget_;
  int b_;  // the lowest unit whose backward is done
  std::vector<State> x_, a_, r_;  // r_: R_i, the rebuildable part of A_i (Gone for a unit without one)
  std::vector<int> x_holder_;    // the op whose keep decides whether x_i survives: the last forward(i)
  std::vector<int> a_producer_;  // the last forward(i), which produced A_i
  std::vector<double> x_used_, a_used_;  // the clock when each was last produced or read
  std::vector<ChainOp> ops_;
  int64_t live_ = 0, held_peak_ = 0;
  double clock_ = 0;
  int evictions_ = 0;
  bool ok_ = true;
  std::string failure_;
};

int64_t none_peak(std::span<const ChainUnit> units) {
  return simulate(units, none_schedule(static_cast<int>(units.size()))).peak_bytes;
}

}  // namespace

DtrRun dtr_run(std::span<const ChainUnit> units, int64_t budget_bytes) {
  check_chain(units);
  DtrRun r = Dtr(units, budget_bytes).run();
  if (r.fits) {
    // The contract is simulate()'s, not our bookkeeping: hold the claim of the header to it.
    const ChainSimulation sim = simulate(units, r.schedule);
    TS_CHECK(sim.peak_bytes <= r.held_peak && r.held_peak <= budget_bytes,
             "internal: DTR's schedule peaks at {} bytes, above the {} it held within a budget of {}", sim.peak_bytes,
             r.held_peak, budget_bytes);
    TS_CHECK(std::abs(sim.time - r.time) <= 1e-9 * std::max(1.0, r.time),
             "internal: DTR's schedule takes {} where DTR computed for {}", sim.time, r.time);
  }
  return r;
}

int64_t dtr_minimum_budget(std::span<const ChainUnit> units, int64_t at_least) {
  check_chain(units);
  int64_t hi = std::max(none_peak(units), at_least);  // DTR never evicts at none's peak
  if (dtr_run(units, at_least).fits) return at_least;
  int64_t lo = at_least;  // fails
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (dtr_run(units, mid).fits ? hi : lo) = mid;
  }
  return hi;
}

ChainSchedule dtr_schedule(std::span<const ChainUnit> units, int64_t budget_bytes) {
  DtrRun r = dtr_run(units, budget_bytes);
  if (r.fits) return std::move(r.schedule);
  const int64_t least = dtr_minimum_budget(units);
  std::string above;
  if (least < budget_bytes) {
    above = fmt::format(" (DTR's greedy evictions are not monotone in the budget: {} bytes fit but {} do not; the "
                        "next budget above that fits is {} bytes)",
                        least, budget_bytes, dtr_minimum_budget(units, budget_bytes));
  }
  TS_FAIL("DTR cannot run this chain of {} units within {} bytes: {}, with everything evictable evicted. The least "
          "budget DTR meets is {} bytes{}; near it DTR thrashes, recomputing far more than the optimal policy "
          "would at the same budget",
          units.size(), budget_bytes, r.failure, least, above);
}

}  // namespace tessera::memory
