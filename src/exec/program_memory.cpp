#include "exec/program_memory.h"

#include <algorithm>

#include "config/activation_bytes.h"

namespace tessera::exec {

namespace {

// The live activation bytes of one rank while its program runs, state by state.
class ActivationWalk {
 public:
  ActivationWalk(const Program& program, const config::ModelConfig& model, int B, int T, int tp, bool sp,
                 DType activations, ActivationEncoding encoding)
      : program_(program),
        bytes_(config::unit_activation_bytes(model, B, T, tp, sp, activations)),
        encoding_(encoding),
        element_bytes_(dtype_size(activations)) {
    const size_t units = bytes_.size();
    for (int m = 0; m < program.microbatches; ++m) {
      const std::vector<int64_t> none(units, 0);
      states_.push_back({std::vector<bool>(units, false), none, none, none, none, static_cast<int>(units)});
    }
    posted_.assign(program.actions.size(), false);
  }

  ProgramMemory run() {
    ProgramMemory out;
    post_receives_after(-1);
    for (int i = 0; i < static_cast<int>(program_.actions.size()); ++i) {
      const Action& a = program_.actions[static_cast<size_t>(i)];
      if (a.kind == Action::Kind::Unit) move_offloaded(i, a);
      int64_t during = live_;
      const int64_t gradients_before = gradients_live_;
      switch (a.kind) {
        case Action::Kind::OptimizerStep:
          break;
        case Action::Kind::Recv:
          if (a.payload == pipeline::Tensor::Activation) {
            if (!posted_[static_cast<size_t>(i)]) live_ += input_bytes(a.unit);  // posted when reached
            state(a).input[static_cast<size_t>(a.unit)] = true;
          } else {
            state(a).backward_done = a.unit;
          }
          during = live_;
          break;
        case Action::Kind::Send:
          if (a.payload == pipeline::Tensor::Activation) drop_input(state(a), a.unit);
          break;
        case Action::Kind::Unit:
          post_receives_after(i);
          during = unit(a, i);
          break;
      }
      out.during.push_back(std::max(during, live_));
      out.after.push_back(live_);
      // An input half makes its own in its workspace, and a weight half reads its own there: each
      // action's workspace covers those, the others' are beside it.
      out.weight_half_gradients.push_back(std::min(gradients_before, gradients_live_));
      out.peak = std::max(out.peak, out.during.back());
    }
    out.nvme_peak = nvme_peak_;
    out.offloaded_bytes = offloaded_bytes_;
    return out;
  }

 private:
  struct MicrobatchState {
    std::vector<bool> input;    // [unit]: x_u is stored (in its slot or the unit's context)
    std::vector<int64_t> kept;  // [unit]: bytes the unit's context holds beyond its input
    std::vector<int64_t> rebuilt;  // [unit]: the most its backward holds rebuilding what a selective forward dropped
    std::vector<int64_t> encoded;  // [unit]: the bytes its encoded stash saves until its backward
    std::vector<int64_t> gradients;  // [unit]: output gradients kept for its weight half
    int backward_done;          // the lowest unit whose backward (input half) ran
  };

  MicrobatchState& state(const Action& a) { return states_[static_cast<size_t>(a.microbatch)]; }
  int64_t input_bytes(int unit) const { return unit == 0 ? 0 : bytes_[static_cast<size_t>(unit - 1)].output; }
  void drop_input(MicrobatchState& s, int unit) {
    if (!s.input[static_cast<size_t>(unit)]) return;
    s.input[static_cast<size_t>(unit)] = false;
    live_ -= input_bytes(unit);
  }

  // Receives are posted before the unit action that precedes their run of transfers.
  void post_receives_after(int i) {
    for (int j = i + 1; j < static_cast<int>(program_.actions.size()); ++j) {
      const Action& a = program_.actions[static_cast<size_t>(j)];
      if (!is_transfer(a)) return;
      if (a.kind != Action::Kind::Recv || posted_[static_cast<size_t>(j)]) continue;
      posted_[static_cast<size_t>(j)] = true;
      if (a.payload != pipeline::Tensor::Activation) continue;  // gradients arrive in workspace
      live_ += input_bytes(a.unit);
    }
  }

  // Offloading (exec/activation_offload.h), before unit action i: writes issued two unit actions
  // ago leave compute memory; a backward's own activations, and those of the next backward of the
  // program, come back.
  void move_offloaded(int i, const Action& a) {
    const int now = unit_actions_++;
    for (Offloaded& o : offloaded_) {
      if (!o.evicted && !o.back && o.written_at < now - 1) {
        o.evicted = true;
        live_ -= o.bytes;
        on_nvme_ += o.bytes;
        nvme_peak_ = std::max(nvme_peak_, on_nvme_);
      }
    }
    if (!writes_gradients(a.phase) || a.phase == Phase::BackwardWeight) return;
    bring_back(a.microbatch, a.unit);
    for (int j = i + 1; j < static_cast<int>(program_.actions.size()); ++j) {
      const Action& next = program_.actions[static_cast<size_t>(j)];
      if (next.kind != Action::Kind::Unit || !writes_gradients(next.phase) || next.phase == Phase::BackwardWeight) {
        continue;
      }
      bring_back(next.microbatch, next.unit);
      break;
    }
  }
  void bring_back(int microbatch, int unit) {
    for (Offloaded& o : offloaded_) {
      if (o.microbatch != microbatch || o.unit != unit || o.back) continue;
      if (o.evicted) {
        live_ += o.bytes;
        on_nvme_ -= o.bytes;
      }
      o.back = true;
    }
  }

  // Runs unit action i; returns the live bytes at its peak.
  int64_t unit(const Action& a, int i) {
    MicrobatchState& s = state(a);
    const auto u = static_cast<size_t>(a.unit);
    const config::UnitActivationBytes& b = bytes_[u];
    const int64_t dropped = a.selective ? b.recomputable : 0;
    const bool last_unit = u + 1 == bytes_.size();
    switch (a.phase) {
      case Phase::Forward:
      case Phase::Recompute:
      case Phase::Eval: {
        const int64_t own = b.own - dropped;
        const int64_t during = live_ + own + b.output + b.forward_transient + (a.selective ? b.selective_forward : 0);
        const bool keeps_all = a.keep == memory::Keep::All && a.phase != Phase::Eval;
        if (keeps_all) {
          s.kept[u] = own;
          s.rebuilt[u] = a.selective ? b.rebuild_peak : 0;
          live_ += own;
          const int64_t stash = own + (s.input[u] ? input_bytes(a.unit) : 0);
          if (encoding_ != ActivationEncoding::None && a.phase == Phase::Forward && !backward_follows(program_, i)) {
            const int64_t sign = a.selective ? 0 : b.sign_only;
            const int64_t values = stash - b.exact - sign;
            s.encoded[u] = stash - (b.exact + encoded_stash_bytes(encoding_, values, sign, element_bytes_));
            live_ -= s.encoded[u];
          }
          // What the unit keeps, its stored input among it, moves to the nvme tier (encoded, if it is).
          if (a.offload && a.phase == Phase::Forward) {
            offloaded_.push_back({a.microbatch, a.unit, stash - s.encoded[u], unit_actions_ - 1});
            offloaded_bytes_ += offloaded_.back().bytes;
          }
        }
        if (!keeps_all && (a.keep == memory::Keep::Nothing || a.phase == Phase::Eval)) drop_input(s, a.unit);
        if (!last_unit && static_cast<int>(u + 1) < s.backward_done) {
          s.input[u + 1] = true;
          live_ += b.output;
        }
        return during;
      }
      case Phase::Backward:
      case Phase::BackwardInput: {
        live_ += s.encoded[u];  // decoded before the backward runs
        s.encoded[u] = 0;
        const int64_t during = live_ + s.rebuilt[u];
        live_ -= s.kept[u];
        s.kept[u] = 0;
        drop_input(s, a.unit);
        s.backward_done = a.unit;
        if (a.phase == Phase::BackwardInput) {
          s.kept[u] = b.weight_half;
          live_ += b.weight_half;
          s.gradients[u] = b.weight_half_gradients;
          gradients_live_ += b.weight_half_gradients;
        }
        return during;
      }
      case Phase::BackwardWeight:
        live_ -= s.kept[u];
        s.kept[u] = 0;
        gradients_live_ -= s.gradients[u];
        s.gradients[u] = 0;
        return live_;
    }
    return live_;
  }

  struct Offloaded {
    int microbatch = 0, unit = 0;
    int64_t bytes = 0;
    int written_at = 0;  // the unit action that saved them
    bool evicted = false, back = false;
  };

  const Program& program_;
  std::vector<Offloaded> offloaded_;
  int unit_actions_ = 0;
  int64_t on_nvme_ = 0, nvme_peak_ = 0, offloaded_bytes_ = 0;
  std::vector<config::UnitActivationBytes> bytes_;
  ActivationEncoding encoding_;
  size_t element_bytes_;
  std::vector<MicrobatchState> states_;
  std::vector<bool> posted_;  // [action]: its receive is posted
  int64_t live_ = 0;
  int64_t gradients_live_ = 0;  // workspace: output gradients kept for weight halves
};

}  // namespace

ProgramMemory predict_program_memory(const Program& program, const config::ModelConfig& model, int B, int T, int tp,
                                     bool sp, DType activations, ActivationEncoding encoding) {
  return ActivationWalk(program, model, B, T, tp, sp, activations, encoding).run();
}

int64_t predict_transient_peak(const Program& program, const ProgramMemory& activations,
                               const std::vector<UnitWorkspace>& workspace, int64_t sent_bytes,
                               const std::vector<int64_t>& comm_during) {
  int64_t peak = 0, sent = 0;
  for (size_t i = 0; i < program.actions.size(); ++i) {
    const Action& a = program.actions[i];
    if (a.kind == Action::Kind::Send) sent += sent_bytes;
    if (a.kind == Action::Kind::Recv) sent = 0;
    const int64_t comm = sent + (comm_during.empty() ? 0 : comm_during[i]);
    const int64_t kept = activations.weight_half_gradients.empty() ? 0 : activations.weight_half_gradients[i];
    if (a.kind != Action::Kind::Unit) {
      peak = std::max(peak, activations.during[i] + kept + comm);
      continue;
    }
    const UnitWorkspace& w = workspace[static_cast<size_t>(a.unit)];
    if (is_forward(a.phase)) {
      peak = std::max(peak, activations.during[i] + w.forward + kept + comm);
      continue;
    }
    peak = std::max({peak, activations.during[i] + w.backward_beside_activations + kept + comm,
                     activations.after[i] + w.backward + kept + comm});
  }
  return peak;
}

}  // namespace tessera::exec
