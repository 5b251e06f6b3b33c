#include "schedule/validator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"

namespace tessera::pipeline {

namespace {

constexpr std::size_t kMaxProblems = 40;  // enough to diagnose, short enough to read

// What has happened to one (stage, microbatch) so far on its rank.
enum Flag : std::uint16_t {
  kForward = 1 << 0,
  kBackward = 1 << 1,  // full backward, or its input-gradient half
  kWeight = 1 << 2,
  kRecompute = 1 << 3,
  kRecvActivation = 1 << 4,
  kRecvGradient = 1 << 5,
  kSentActivation = 1 << 6,
  kSentGradient = 1 << 7,
};

class Checker {
 public:
  explicit Checker(const Schedule& s)
      : s_(s),
        stages_(s.stages()),
        mbs_(s.total_microbatches()),
        flags_(static_cast<std::size_t>(stages_) * mbs_, 0),
        version_(flags_.size(), -1),
        oldest_version_(std::max(0, s.first_step - 1)),
        current_version_(stages_, s.first_step),
        alive_(stages_, 0),
        version_users_(stages_, std::vector<int>(s.first_step + s.steps + 1 - oldest_version_, 0)) {
    report_.peak_alive_per_stage.assign(stages_, 0);
    report_.peak_alive_per_rank.assign(s.ranks, 0);
    report_.peak_weight_versions.assign(stages_, 1);
  }

  ValidationReport run() {
    TS_CHECK(static_cast<int>(s_.programs.size()) == s_.ranks, "schedule has {} lists for {} ranks",
             s_.programs.size(), s_.ranks);
    bool well_formed = true;
    for (int r = 0; r < s_.ranks; ++r)
      for (std::size_t k = 0; k < s_.programs[r].size(); ++k) well_formed &= check_form(r, k);
    if (!well_formed) return finish();  // later checks would only repeat the same faults
    for (int r = 0; r < s_.ranks; ++r) walk_rank(r);
    check_completion();
    check_matching();
    check_deadlock();
    return finish();
  }

 private:
  const Schedule& s_;
  int stages_, mbs_;
  std::vector<std::uint16_t> flags_;
  std::vector<int> version_;          // weight version a (stage, microbatch) reads
  int oldest_version_;                // the lowest version the lists may read
  std::vector<int> current_version_;  // newest weight version of each stage
  std::vector<int> alive_;            // microbatches alive per stage
  // [stage][version - oldest_version_]: alive microbatches reading it
  std::vector<std::vector<int>> version_users_;
  ValidationReport report_;
  std::size_t dropped_ = 0;

  std::size_t slot(int stage, int mb) const { return static_cast<std::size_t>(stage) * mbs_ + mb; }

  void problem(std::string text) {
    if (report_.problems.size() < kMaxProblems)
      report_.problems.push_back(std::move(text));
    else
      ++dropped_;
  }
  std::string at(int r, std::size_t k) const {
    return fmt::format("rank {} #{} ({})", r, k, describe(s_.programs[r][k]));
  }

  ValidationReport finish() {
    if (dropped_ > 0) report_.problems.push_back(fmt::format("... and {} more problems", dropped_));
    return std::move(report_);
  }

  bool check_form(int r, std::size_t k) {
    const Instruction& ins = s_.programs[r][k];
    const auto bad = [&](std::string_view why) {
      problem(fmt::format("{}: {}", at(r, k), why));
      return false;
    };
    if (ins.stage < 0 || ins.stage >= stages_) return bad(fmt::format("stage outside [0, {})", stages_));
    if (s_.rank_of_stage(ins.stage) != r)
      return bad(fmt::format("stage {} lives on rank {}, not here", ins.stage, s_.rank_of_stage(ins.stage)));
    if (ins.chunk != s_.chunk_of_stage(ins.stage))
      return bad(fmt::format("stage {} is chunk {} of its rank", ins.stage, s_.chunk_of_stage(ins.stage)));
    if (ins.op == Op::OptimizerStep) {
      if (ins.microbatch != -1) return bad("an optimizer step belongs to no microbatch");
    } else if (ins.microbatch < 0 || ins.microbatch >= mbs_) {
      return bad(fmt::format("microbatch outside [0, {})", mbs_));
    }
    if (ins.op == Op::Backward && s_.split_backward)
      return bad("this schedule splits backward into backward-input and backward-weight");
    if ((ins.op == Op::BackwardInput || ins.op == Op::BackwardWeight) && !s_.split_backward)
      return bad("this schedule does not split backward");
    if (is_compute(ins.op)) {
      if (ins.tensor != Tensor::None || ins.peer != -1) return bad("a compute instruction has no tensor or peer");
      if (ins.weight_version < oldest_version_ || ins.weight_version > s_.first_step + s_.steps)
        return bad("weight version out of range");
      return true;
    }
    if (ins.tensor == Tensor::None) return bad("a transfer must name its tensor");
    const bool act = ins.tensor == Tensor::Activation;
    const bool send = ins.op == Op::Send;
    // The neighbour stage this transfer talks to.
    const int other = (act == send) ? ins.stage + 1 : ins.stage - 1;
    if (other < 0 || other >= stages_) return bad("there is no stage on the other side");
    const int peer = s_.rank_of_stage(other);
    if (peer == r) return bad("both stages live on this rank: no transfer is needed");
    if (ins.peer != peer) return bad(fmt::format("stage {} lives on rank {}", other, peer));
    return true;
  }

  void update_versions(int stage) {
    const auto& users = version_users_[stage];
    int distinct = 0;
    for (std::size_t v = 0; v < users.size(); ++v)
      distinct += (users[v] > 0 || static_cast<int>(v) + oldest_version_ == current_version_[stage]) ? 1 : 0;
    report_.peak_weight_versions[stage] = std::max(report_.peak_weight_versions[stage], distinct);
    if (s_.kind == ScheduleKind::PipeDream2BW && distinct > 2)
      problem(fmt::format("stage {}: {} weight versions alive at once; double buffering holds two", stage, distinct));
  }

  void release(int stage, int mb, int& rank_alive) {
    --alive_[stage];
    --rank_alive;
    --version_users_[stage][version_[slot(stage, mb)] - oldest_version_];
  }

  void walk_rank(int r) {
    int rank_alive = 0;
    const auto& program = s_.programs[r];
    for (std::size_t k = 0; k < program.size(); ++k) {
      const Instruction& ins = program[k];
      const int st = ins.stage, mb = ins.microbatch;
      const auto fail = [&](std::string_view why) { problem(fmt::format("{}: {}", at(r, k), why)); };
      if (ins.op == Op::OptimizerStep) {
        optimizer_step(r, k);
        continue;
      }
      std::uint16_t& f = flags_[slot(st, mb)];
      const auto once = [&](Flag flag, std::string_view what) {
        if (f & flag) fail(fmt::format("{} a second time", what));
        f |= flag;
      };
      const auto same_version = [&] {
        if (version_[slot(st, mb)] != ins.weight_version)
          fail(fmt::format("reads weights v{} but its forward read v{}", ins.weight_version, version_[slot(st, mb)]));
      };
      switch (ins.op) {
        case Op::Forward: {
          if (st > 0) {
            const bool local = s_.rank_of_stage(st - 1) == r;
            if (local && !(flags_[slot(st - 1, mb)] & kForward))
              fail(fmt::format("runs before the forward of stage {} on this rank", st - 1));
            if (!local && !(f & kRecvActivation)) fail("runs before its input activation was received");
          }
          if (ins.weight_version > current_version_[st])
            fail(fmt::format("reads weights v{} before they exist (newest is v{})", ins.weight_version,
                             current_version_[st]));
          if (s_.flush && ins.weight_version != current_version_[st])
            fail(fmt::format("reads weights v{} but the newest is v{}", ins.weight_version, current_version_[st]));
          if (f & kForward) {
            fail("forward a second time");
            break;
          }
          f |= kForward;
          version_[slot(st, mb)] = ins.weight_version;
          ++alive_[st];
          ++rank_alive;
          ++version_users_[st][ins.weight_version - oldest_version_];
          report_.peak_alive_per_stage[st] = std::max(report_.peak_alive_per_stage[st], alive_[st]);
          report_.peak_alive_per_rank[r] = std::max(report_.peak_alive_per_rank[r], rank_alive);
          update_versions(st);
          break;
        }
        case Op::Recompute:
          if (!(f & kForward)) fail("recomputes a forward that has not run");
          if (f & kBackward) fail("recomputes after the backward that needed it");
          if (f & kForward) same_version();
          once(kRecompute, "recompute");
          break;
        case Op::Backward:
        case Op::BackwardInput: {
          if (!(f & kForward)) {
            fail("runs before its forward");
            break;
          }
          same_version();
          if (s_.recompute && !(f & kRecompute)) fail("runs without the recompute this schedule asks for");
          if (st + 1 < stages_) {
            const bool local = s_.rank_of_stage(st + 1) == r;
            if (local && !(flags_[slot(st + 1, mb)] & kBackward))
              fail(fmt::format("runs before the backward of stage {} on this rank", st + 1));
            if (!local && !(f & kRecvGradient)) fail("runs before its output gradient was received");
          }
          if (f & kBackward) {
            fail("backward a second time");
            break;
          }
          f |= kBackward;
          if (ins.op == Op::Backward) release(st, mb, rank_alive);
          break;
        }
        case Op::BackwardWeight:
          if (!(f & kBackward)) {
            fail("runs before its backward-input");
            break;
          }
          same_version();
          if (f & kWeight) {
            fail("backward-weight a second time");
            break;
          }
          f |= kWeight;
          release(st, mb, rank_alive);
          break;
        case Op::Send:
          if (ins.tensor == Tensor::Activation) {
            if (!(f & kForward)) fail("sends an activation its forward has not made yet");
            once(kSentActivation, "sends the activation");
          } else {
            if (!(f & kBackward)) fail("sends a gradient its backward has not made yet");
            once(kSentGradient, "sends the gradient");
          }
          break;
        case Op::Recv:
          once(ins.tensor == Tensor::Activation ? kRecvActivation : kRecvGradient, "receives");
          break;
        case Op::OptimizerStep: break;
      }
    }
  }

  void optimizer_step(int r, std::size_t k) {
    const Instruction& ins = s_.programs[r][k];
    const int st = ins.stage;
    const auto fail = [&](std::string_view why) { problem(fmt::format("{}: {}", at(r, k), why)); };
    if (ins.weight_version != current_version_[st] + 1) {
      fail(fmt::format("should produce weights v{}", current_version_[st] + 1));
      return;
    }
    // A flushing step applies every microbatch; a 2BW step applies batch (version - 1).
    const int first = s_.flush ? 0 : (ins.weight_version - 1 - s_.first_step) * s_.microbatches;
    const int last = s_.flush ? mbs_ : first + s_.microbatches;
    const std::uint16_t needed = s_.split_backward ? (kBackward | kWeight) : kBackward;
    for (int mb = first; mb < last; ++mb)
      if ((flags_[slot(st, mb)] & needed) != needed) {
        fail(fmt::format("runs before the backward of microbatch {} finished on this stage", mb));
        break;
      }
    current_version_[st] = ins.weight_version;
    update_versions(st);
  }

  void check_completion() {
    for (int st = 0; st < stages_; ++st) {
      const int expected_steps = s_.flush ? 1 : s_.first_step + s_.steps;
      if (current_version_[st] != expected_steps)
        problem(fmt::format("stage {} (rank {}): {} optimizer steps, expected {}", st, s_.rank_of_stage(st),
                            current_version_[st], expected_steps));
      for (int mb = 0; mb < mbs_; ++mb) {
        const std::uint16_t f = flags_[slot(st, mb)];
        const auto missing = [&](std::string_view what) {
          problem(fmt::format("microbatch {} never {} on stage {} (rank {})", mb, what, st, s_.rank_of_stage(st)));
        };
        if (!(f & kForward)) missing("runs forward");
        if (!(f & kBackward)) missing("runs backward");
        if (s_.split_backward && !(f & kWeight)) missing("runs backward-weight");
        if (s_.recompute && !(f & kRecompute)) missing("recomputes");
        const bool remote_next = st + 1 < stages_ && s_.rank_of_stage(st + 1) != s_.rank_of_stage(st);
        if (remote_next && !(f & kRecvGradient)) missing("receives its gradient");
        if (remote_next && !(f & kSentActivation)) missing("sends its activation");
        const bool remote_prev = st > 0 && s_.rank_of_stage(st - 1) != s_.rank_of_stage(st);
        if (remote_prev && !(f & kRecvActivation)) missing("receives its activation");
        if (remote_prev && !(f & kSentGradient)) missing("sends its gradient");
      }
    }
  }

  // Every transfer key (tensor, edge, microbatch) must appear once as Send and once as Recv.
  void check_matching() {
    const std::size_t keys = 2 * flags_.size();
    std::vector<int> sends(keys, 0), recvs(keys, 0);
    std::vector<std::pair<int, std::size_t>> where(keys);
    for (int r = 0; r < s_.ranks; ++r)
      for (std::size_t k = 0; k < s_.programs[r].size(); ++k) {
        const Instruction& ins = s_.programs[r][k];
        if (!is_transfer(ins.op)) continue;
        const std::size_t key = (ins.tensor == Tensor::Gradient ? flags_.size() : 0) + slot(transfer_edge(ins), ins.microbatch);
        (ins.op == Op::Send ? sends : recvs)[key]++;
        where[key] = {r, k};
      }
    for (std::size_t key = 0; key < keys; ++key) {
      if (sends[key] == 1 && recvs[key] == 1) continue;
      if (sends[key] == 0 && recvs[key] == 0) continue;
      const auto [r, k] = where[key];
      problem(fmt::format("{}: {} send(s) and {} recv(s) of this tensor; each needs exactly one partner", at(r, k),
                          sends[key], recvs[key]));
    }
  }

  static bool partners(const Instruction& a, int a_rank, const Instruction& b, int b_rank) {
    return a.op != b.op && a.tensor == b.tensor && a.microbatch == b.microbatch && a.peer == b_rank &&
           b.peer == a_rank && transfer_edge(a) == transfer_edge(b);
  }

  // Rendezvous semantics: a transfer completes only when both ranks stand at its two halves.
  void check_deadlock() {
    const int p = s_.ranks;
    std::vector<std::size_t> pc(p, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < p; ++r) {
        const auto& program = s_.programs[r];
        while (pc[r] < program.size()) {
          const Instruction& ins = program[pc[r]];
          if (is_compute(ins.op)) {
            ++pc[r];
            progress = true;
            continue;
          }
          const int q = ins.peer;
          if (pc[q] >= s_.programs[q].size() || !partners(ins, r, s_.programs[q][pc[q]], q)) break;
          ++pc[r];
          ++pc[q];
          ++report_.transfers;
          progress = true;
        }
      }
    }
    std::string stuck;
    for (int r = 0; r < p; ++r) {
      if (pc[r] == s_.programs[r].size()) continue;
      const int q = s_.programs[r][pc[r]].peer;
      const std::string peer_state = pc[q] < s_.programs[q].size()
                                         ? fmt::format("rank {} waits at #{} ({})", q, pc[q], describe(s_.programs[q][pc[q]]))
                                         : fmt::format("rank {} has finished", q);
      stuck += fmt::format("\n  {} blocks: {}", at(r, pc[r]), peer_state);
    }
    if (!stuck.empty()) problem("deadlock: no rank can progress, sends and receives wait on each other:" + stuck);
  }
};

}  // namespace

std::string ValidationReport::summary() const {
  if (!ok()) {
    std::string text = fmt::format("invalid schedule, {} problem(s):", problems.size());
    for (const auto& p : problems) text += "\n- " + p;
    return text;
  }
  return fmt::format("valid: {} transfers matched, no deadlock under blocking send/recv; peak microbatches alive "
                     "per rank [{}]",
                     transfers, fmt::join(peak_alive_per_rank, ", "));
}

ValidationReport validate(const Schedule& schedule) {
  TS_CHECK(schedule.ranks >= 1 && schedule.chunks >= 1 && schedule.microbatches >= 1 && schedule.steps >= 1,
           "schedule shape p = {}, v = {}, m = {}, steps = {}: each must be at least 1", schedule.ranks,
           schedule.chunks, schedule.microbatches, schedule.steps);
  TS_CHECK(schedule.first_step >= 0 && (schedule.first_step == 0 || !schedule.flush),
           "schedule with {} optimizer steps before it: only a schedule without flushes (2bw) continues a run",
           schedule.first_step);
  return Checker(schedule).run();
}

ValidationReport check_valid(const Schedule& schedule) {
  ValidationReport report = validate(schedule);
  TS_CHECK(report.ok(), "{} schedule (p = {}, m = {}, v = {}): {}", schedule_name(schedule.kind), schedule.ranks,
           schedule.microbatches, schedule.chunks, report.summary());
  return report;
}

}  // namespace tessera::pipeline
