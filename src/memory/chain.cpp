#include "memory/chain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tessera::memory {

std::string_view keep_name(Keep keep) {
  switch (keep) {
    case Keep::All: return "all";
    case Keep::Input: return "input";
    case Keep::Nothing: return "nothing";
    case Keep::Selective: return "selective";
  }
  TS_FAIL("unknown keep value {}", static_cast<int>(keep));
}

std::string describe(const ChainOp& op) {
  if (op.is_forward()) return fmt::format("forward({}, keep={})", op.unit, keep_name(op.keep));
  return fmt::format("backward({})", op.unit);
}

void check_chain(std::span<const ChainUnit> units) {
  TS_CHECK(!units.empty(), "a recompute chain needs at least one unit (the loss unit)");
  const int n = static_cast<int>(units.size());
  for (int i = 0; i < n; ++i) {
    const ChainUnit& u = units[i];
    TS_CHECK(u.input_bytes >= 0 && u.own_bytes >= 0 && u.output_bytes >= 0 && u.backward_extra_bytes >= 0 &&
                 u.forward_extra_bytes >= 0 && u.rebuild_bytes >= 0 && u.selective_forward_extra_bytes >= 0,
             "chain unit {} has a negative size (input {}, own {}, output {}, backward extra {}, rebuild {}, "
             "selective forward extra {} bytes); sizes count bytes and must be >= 0",
             i, u.input_bytes, u.own_bytes, u.output_bytes, u.backward_extra_bytes, u.rebuild_bytes,
             u.selective_forward_extra_bytes);
    TS_CHECK(u.rebuildable_bytes >= 0 && u.rebuildable_bytes <= u.own_bytes,
             "chain unit {} can rebuild {} bytes of the {} it keeps; the rebuildable part is part of what it keeps",
             i, u.rebuildable_bytes, u.own_bytes);
    TS_CHECK(std::isfinite(u.forward_time) && std::isfinite(u.backward_time) && std::isfinite(u.rebuild_time) &&
                 u.forward_time >= 0 && u.backward_time >= 0 && u.rebuild_time >= 0,
             "chain unit {} has forward time {}, backward time {} and rebuild time {}; times must be finite and >= 0",
             i, u.forward_time, u.backward_time, u.rebuild_time);
    if (i + 1 < n) {
      TS_CHECK(u.output_bytes == units[i + 1].input_bytes,
               "chain unit {} outputs {} bytes but unit {} reads {} bytes: both are the tensor x_{}, so "
               "build the chain with equal sizes",
               i, u.output_bytes, i + 1, units[i + 1].input_bytes, i + 1);
    }
  }
}

namespace {

// The state of the rules in chain.h, with the live bytes kept up to date.
class Simulator {
 public:
  explicit Simulator(std::span<const ChainUnit> units)
      : units_(units), n_(static_cast<int>(units.size())), present_(units.size(), false), kept_(units.size(), false),
        selective_(units.size(), false), b_(n_) {
    present_[0] = true;
    live_ = units_[0].input_bytes;
  }

  int done_below() const { return b_; }
  int64_t live() const { return live_; }

  // Applies op, or returns why it cannot run.
  std::string apply(const ChainOp& op, ChainStep& step) {
    const int i = op.unit;
    if (i < 0 || i >= n_) return fmt::format("unit {} does not exist (the chain has units 0..{})", i, n_ - 1);
    step.op = op;
    if (op.is_forward()) {
      if (i >= b_) return fmt::format("unit {}'s backward is already done", i);
      if (!present_[i]) return fmt::format("its input x_{} is not stored (drop it later or recompute it first)", i);
      if (kept_[i]) return fmt::format("unit {}'s activations are still kept from an earlier forward", i);
      if (i + 1 < b_ && present_[i + 1]) {
        return fmt::format("its output x_{} is still stored: recomputing a stored tensor wastes memory and time", i + 1);
      }
      const ChainUnit& u = units_[i];
      const bool selective = op.keep == Keep::Selective;
      if (selective && u.rebuildable_bytes == 0) {
        return fmt::format("unit {} has nothing to rebuild, so it has no selective forward", i);
      }
      const int64_t kept = u.own_bytes - (selective ? u.rebuildable_bytes : 0);
      step.peak_bytes = live_ + kept + u.output_bytes + u.forward_extra_bytes +
                        (selective ? u.selective_forward_extra_bytes : 0);
      if (i + 1 < b_ && i + 1 < n_) {
        present_[i + 1] = true;
        live_ += units_[i + 1].input_bytes;
      }
      if (op.keep == Keep::All || selective) {
        kept_[i] = true;
        selective_[i] = selective;
        live_ += kept;
      } else if (op.keep == Keep::Nothing) {
        present_[i] = false;
        live_ -= u.input_bytes;
      }
    } else {
      if (b_ == 0) return "every backward is already done";
      if (i != b_ - 1) {
        return b_ == n_ ? fmt::format("the first backward must be unit {}'s (the loss unit)", n_ - 1)
                        : fmt::format("the next backward is unit {}'s (backwards run from the loss down)", b_ - 1);
      }
      if (!kept_[i]) return fmt::format("unit {}'s activations are not kept: run forward({}, keep=all) first", i, i);
      const ChainUnit& u = units_[i];
      step.rebuild = selective_[i];
      step.peak_bytes = live_ + u.backward_extra_bytes + (step.rebuild ? u.rebuild_bytes : 0);
      kept_[i] = false;
      selective_[i] = false;
      present_[i] = false;
      live_ -= u.own_bytes - (step.rebuild ? u.rebuildable_bytes : 0) + u.input_bytes;
      b_ = i;
    }
    step.live_after = live_;
    return {};
  }

 private:
  std::span<const ChainUnit> units_;
  int n_;
  std::vector<bool> present_;  // x_i stored
  std::vector<bool> kept_;     // unit i's activations kept
  std::vector<bool> selective_;  // ... by a Selective forward: less the rebuildable part
  int b_;
  int64_t live_ = 0;
};

// The structure the interpreter relies on beyond the rules: the forward phase is the plain
// forward pass, so its ops are fixed but for what each keeps.
void check_forward_phase(const ChainSchedule& schedule, int n) {
  TS_CHECK(static_cast<int>(schedule.forward.size()) == n,
           "invalid recompute schedule: the forward phase has {} ops for a chain of {} units; it must run "
           "every unit once, in order",
           schedule.forward.size(), n);
  for (int k = 0; k < n; ++k) {
    const ChainOp& op = schedule.forward[k];
    TS_CHECK(op.is_forward() && op.unit == k,
             "invalid recompute schedule: forward-phase op {} is {}, expected a forward of unit {} (the forward "
             "phase runs every unit once, in order)",
             k, describe(op), k);
  }
  TS_CHECK(schedule.forward.back().keep == Keep::All,
           "invalid recompute schedule: the loss unit's forward is {}; it must keep everything, since its "
           "backward comes next",
           describe(schedule.forward.back()));
  TS_CHECK(!schedule.backward.empty() && schedule.backward.front() == ChainOp::backward(n - 1),
           "invalid recompute schedule: the backward phase starts with {}, expected backward({}) (the loss unit)",
           schedule.backward.empty() ? std::string("nothing") : describe(schedule.backward.front()), n - 1);
}

}  // namespace

std::vector<ChainStep> simulate_steps(std::span<const ChainUnit> units, const ChainSchedule& schedule) {
  check_chain(units);
  const int n = static_cast<int>(units.size());
  check_forward_phase(schedule, n);
  Simulator sim(units);
  std::vector<ChainStep> steps;
  steps.reserve(schedule.forward.size() + schedule.backward.size());
  for (int phase = 0; phase < 2; ++phase) {
    const auto& ops = phase == 0 ? schedule.forward : schedule.backward;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      ChainStep step;
      step.recompute = phase == 1 && ops[k].is_forward();
      const std::string problem = sim.apply(ops[k], step);
      TS_CHECK(problem.empty(), "invalid recompute schedule: {}-phase op {} ({}) cannot run: {}",
               phase == 0 ? "forward" : "backward", k, describe(ops[k]), problem);
      steps.push_back(step);
    }
  }
  TS_CHECK(sim.done_below() == 0,
           "incomplete recompute schedule: it ends with units 0..{} still waiting for their backward; append "
           "backward({}) and whatever recomputation it needs",
           sim.done_below() - 1, sim.done_below() - 1);
  return steps;
}

ChainSimulation simulate(std::span<const ChainUnit> units, const ChainSchedule& schedule) {
  const std::vector<ChainStep> steps = simulate_steps(units, schedule);
  ChainSimulation r;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const ChainStep& s = steps[k];
    const ChainUnit& u = units[s.op.unit];
    r.peak_bytes = std::max(r.peak_bytes, s.peak_bytes);
    r.time += s.op.is_forward() ? u.forward_time : u.backward_time + (s.rebuild ? u.rebuild_time : 0);
    r.recomputed_forwards += s.recompute ? 1 : 0;
    r.rebuilds += s.rebuild ? 1 : 0;
    if (k + 1 == schedule.forward.size()) r.after_forward_bytes = s.live_after;
  }
  return r;
}

}  // namespace tessera::memory
