// The chain simulator against peaks and times worked out by hand, the simple policies' op lists,
// and the refusals of broken schedules and chains.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "memory/chain.h"
#include "memory/recompute_policy.h"

using namespace tessera;
using namespace tessera::memory;
using namespace tessera::config;

namespace {

// Four units with uneven sizes so that every rule shows in the numbers. x_0..x_3 are 4, 3, 5, 2
// bytes; unit 3 is the loss. Forward times sum to 7, backward times to 10.
std::vector<ChainUnit> hand_chain() {
  return {
      {.input_bytes = 4, .own_bytes = 10, .output_bytes = 3, .backward_extra_bytes = 2, .forward_time = 1, .backward_time = 2},
      {.input_bytes = 3, .own_bytes = 6, .output_bytes = 5, .backward_extra_bytes = 0, .forward_time = 2, .backward_time = 3},
      {.input_bytes = 5, .own_bytes = 8, .output_bytes = 2, .backward_extra_bytes = 1, .forward_time = 3, .backward_time = 4},
      {.input_bytes = 2, .own_bytes = 7, .output_bytes = 0, .backward_extra_bytes = 5, .forward_time = 1, .backward_time = 1},
  };
}

std::vector<int64_t> peaks(const std::vector<ChainStep>& steps) {
  std::vector<int64_t> p;
  for (const ChainStep& s : steps) p.push_back(s.peak_bytes);
  return p;
}

// Runs simulate() and returns its error message ("" when it accepted the schedule).
std::string refusal(const std::vector<ChainUnit>& units, const ChainSchedule& s) {
  try {
    simulate(units, s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using F = ChainOp;

}  // namespace

// none: live starts at x_0 = 4. Each forward peaks at live + own + out and then adds own + out:
// 4+10+3 = 17, 17+6+5 = 28, 28+8+2 = 38, 38+7+0 = 45 (the loss has no output), so 45 at the end of
// the forward phase. Backwards peak at live + extra and drop own + input: 45+5 = 50 -> 36,
// 36+1 = 37 -> 23, 23+0 -> 14, 14+2 = 16 -> 0. Peak 50; time 7 + 10 = 17.
TEST(ChainSimulate, NoneByHand) {
  const auto units = hand_chain();
  const auto steps = simulate_steps(units, none_schedule(4));
  EXPECT_EQ(peaks(steps), (std::vector<int64_t>{17, 28, 38, 45, 50, 37, 23, 16}));
  EXPECT_EQ(steps.back().live_after, 0);
  const ChainSimulation r = simulate(units, none_schedule(4));
  EXPECT_EQ(r.peak_bytes, 50);
  EXPECT_EQ(r.after_forward_bytes, 45);
  EXPECT_DOUBLE_EQ(r.time, 17.0);
  EXPECT_EQ(r.recomputed_forwards, 0);
}

// full: segments [0], [1], [2]. Forward phase, all keeping their input: 4+10+3 = 17 -> 7 (x_0, x_1),
// 7+6+5 = 18 -> 12, 12+8+2 = 22 -> 14 (x_0..x_3), loss 14+7 = 21 -> 21. Backward(3): 21+5 = 26 -> 12.
// Unit 2 recomputed: 12+8+2 = 22 (its output x_3 is below b and dropped at once) -> 20, backward
// 20+1 = 21 -> 7. Unit 1: 7+6+5 = 18 -> 13, backward 13 -> 4. Unit 0: 4+10+3 = 17 -> 14, backward
// 16 -> 0. Peak 26; time 17 + recomputing units 0..2 (1+2+3) = 23.
TEST(ChainSimulate, FullByHand) {
  const auto units = hand_chain();
  const auto steps = simulate_steps(units, full_schedule(4));
  EXPECT_EQ(peaks(steps), (std::vector<int64_t>{17, 18, 22, 21, 26, 22, 21, 18, 13, 17, 16}));
  const ChainSimulation r = simulate(units, full_schedule(4));
  EXPECT_EQ(r.peak_bytes, 26);
  EXPECT_EQ(r.after_forward_bytes, 21);
  EXPECT_DOUBLE_EQ(r.time, 23.0);
  EXPECT_EQ(r.recomputed_forwards, 3);
}

// every_k(2): segments [0, 1], [2]. Forward: unit 0 keeps x_0: 17 -> 7; unit 1 keeps nothing:
// 7+6+5 = 18 -> 4+5 = 9 (x_1 dropped, x_2 stored); unit 2 keeps x_2: 9+8+2 = 19 -> 11; loss
// 11+7 = 18 -> 18. Backward(3): 23 -> 9. Segment [2]: 9+8+2 = 19 -> 17, backward 18 -> 4.
// Segment [0, 1]: 4+10+3 = 17 -> 17, 17+6+5 = 28 -> 23 (x_2 is below b: dropped), backwards
// 23 -> 14 and 16 -> 0. Peak 28: recomputing a long segment keeping everything costs more than
// storing x_2 saves. Time 17 + 6 = 23.
TEST(ChainSimulate, EveryTwoByHand) {
  const auto units = hand_chain();
  const auto steps = simulate_steps(units, every_k_schedule(4, 2));
  EXPECT_EQ(peaks(steps), (std::vector<int64_t>{17, 18, 19, 18, 23, 19, 18, 17, 28, 23, 16}));
  const ChainSimulation r = simulate(units, every_k_schedule(4, 2));
  EXPECT_EQ(r.peak_bytes, 28);
  EXPECT_EQ(r.after_forward_bytes, 18);
  EXPECT_DOUBLE_EQ(r.time, 23.0);
  EXPECT_EQ(r.recomputed_forwards, 3);
}

// One segment (k >= n - 1): only x_0 survives the forward phase besides the loss unit:
// 17 -> 7, 18 -> 9, 9+8+2 = 19 -> 4+2 = 6, loss 13 -> 13. Backward(3): 18 -> 4. Then units 0..2
// are recomputed keeping everything: 17 -> 17, 28 -> 28, 28+8+2 = 38 -> 36, and the backwards
// 37 -> 23, 23 -> 14, 16 -> 0. Peak 38, after the forward phase 13.
TEST(ChainSimulate, OneSegmentByHand) {
  const auto units = hand_chain();
  for (int k : {3, 7}) {
    const ChainSimulation r = simulate(units, every_k_schedule(4, k));
    EXPECT_EQ(r.peak_bytes, 38) << "k=" << k;
    EXPECT_EQ(r.after_forward_bytes, 13) << "k=" << k;
    EXPECT_DOUBLE_EQ(r.time, 23.0) << "k=" << k;
  }
}

// A selective chain is the same schedule with less kept and more allocated during the backward:
// the backward extra shows up at the backward's peak only.
TEST(ChainSimulate, BackwardExtraCountsDuringTheBackwardOnly) {
  auto units = hand_chain();
  units[3].backward_extra_bytes = 100;
  const auto steps = simulate_steps(units, none_schedule(4));
  EXPECT_EQ(steps[4].peak_bytes, 145);
  EXPECT_EQ(steps[4].live_after, 36);
  EXPECT_EQ(simulate(units, none_schedule(4)).after_forward_bytes, 45);
}

// What a forward holds only while it runs (a selective block's MLP activation until its
// projection has read it) raises that forward's peak and nothing after it.
TEST(ChainSimulate, ForwardExtraCountsDuringTheForwardOnly) {
  auto units = hand_chain();
  const auto plain = simulate_steps(units, none_schedule(4));
  units[0].forward_extra_bytes = 50;
  const auto steps = simulate_steps(units, none_schedule(4));
  EXPECT_EQ(plain[0].peak_bytes, 17);  // x0 4 + own 10 + output 3
  EXPECT_EQ(steps[0].peak_bytes, 67);
  EXPECT_EQ(steps[0].live_after, plain[0].live_after);
  EXPECT_EQ(simulate(units, none_schedule(4)).after_forward_bytes, simulate(hand_chain(), none_schedule(4)).after_forward_bytes);
  EXPECT_EQ(simulate(units, none_schedule(4)).peak_bytes, 67);
}

// A selective keep: unit 1 rebuilds 4 of its 6 kept bytes (holding 5 while it does, in 0.5), and
// its forward holds 1 byte of them until the op reading it ran. Forward: 17; 17 + 2 + 5 + 1 = 25,
// leaving 24; 24 + 8 + 2 = 34; 34 + 7 = 41. Backwards: 41 + 5 = 46 -> 32; 32 + 1 = 33 -> 19; unit
// 1's rebuild 19 + 5 = 24 -> 19 - 2 - 3 = 14; 14 + 2 = 16 -> 0. Time 7 + 10 + 0.5.
TEST(ChainSimulate, SelectiveKeepsLessAndRebuildsInTheBackward) {
  auto units = hand_chain();
  units[1].rebuildable_bytes = 4;
  units[1].rebuild_bytes = 5;
  units[1].selective_forward_extra_bytes = 1;
  units[1].rebuild_time = 0.5;
  EXPECT_EQ(simulate(units, none_schedule(4)).peak_bytes, 50) << "offering a selective keep changes nothing else";
  ChainSchedule s = none_schedule(4);
  s.forward[1].keep = Keep::Selective;
  const auto steps = simulate_steps(units, s);
  EXPECT_EQ(peaks(steps), (std::vector<int64_t>{17, 25, 34, 41, 46, 33, 24, 16}));
  EXPECT_EQ(steps[1].live_after, 24);
  EXPECT_EQ(steps.back().live_after, 0);
  for (size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(steps[k].rebuild, k == 6) << "step " << k;
  const ChainSimulation r = simulate(units, s);
  EXPECT_EQ(r.peak_bytes, 46);
  EXPECT_DOUBLE_EQ(r.time, 17.5);
  EXPECT_EQ(describe(s.forward[1]), "forward(1, keep=selective)");
  // A recomputation may keep selectively too: full recomputation with unit 1 rebuilt.
  ChainSchedule full = full_schedule(4);
  for (ChainOp& op : full.backward) {
    if (op.is_forward() && op.unit == 1) op.keep = Keep::Selective;
  }
  EXPECT_DOUBLE_EQ(simulate(units, full).time, simulate(units, full_schedule(4)).time + 0.5);
  // Unit 0 has nothing to rebuild.
  ChainSchedule bad = none_schedule(4);
  bad.forward[0].keep = Keep::Selective;
  EXPECT_NE(refusal(units, bad).find("unit 0 has nothing to rebuild"), std::string::npos) << refusal(units, bad);
  units[1].rebuildable_bytes = 7;
  EXPECT_NE(refusal(units, s).find("can rebuild 7 bytes of the 6"), std::string::npos) << refusal(units, s);
}

TEST(ChainSimulate, SingleUnit) {
  const std::vector<ChainUnit> units{
      {.input_bytes = 4, .own_bytes = 6, .output_bytes = 0, .backward_extra_bytes = 3, .forward_time = 1, .backward_time = 2}};
  EXPECT_EQ(every_k_schedule(1, 3), none_schedule(1));
  const ChainSimulation r = simulate(units, none_schedule(1));
  EXPECT_EQ(r.peak_bytes, 13);  // 4 + 6 + 3 during the backward
  EXPECT_EQ(r.after_forward_bytes, 10);
  EXPECT_DOUBLE_EQ(r.time, 3.0);
}

TEST(ChainSimulate, RefusesBrokenSchedules) {
  const auto units = hand_chain();

  ChainSchedule swapped = none_schedule(4);
  std::swap(swapped.backward[1], swapped.backward[2]);
  EXPECT_NE(refusal(units, swapped).find("backward-phase op 1 (backward(1)) cannot run: the next backward is unit 2"),
            std::string::npos)
      << refusal(units, swapped);

  // Unit 0 drops x_0, and the backward phase later needs it to recompute unit 0.
  ChainSchedule lost_input = every_k_schedule(4, 2);
  lost_input.forward[0].keep = Keep::Nothing;
  EXPECT_NE(refusal(units, lost_input).find("backward-phase op 3 (forward(0, keep=all)) cannot run: its input x_0 is not stored"),
            std::string::npos)
      << refusal(units, lost_input);

  ChainSchedule missing = none_schedule(4);
  missing.backward.pop_back();
  EXPECT_NE(refusal(units, missing).find("incomplete recompute schedule"), std::string::npos);
  EXPECT_NE(refusal(units, missing).find("backward(0)"), std::string::npos);

  // full stores x_2; recomputing unit 1 would make it a second time.
  ChainSchedule twice = full_schedule(4);
  twice.backward.insert(twice.backward.begin() + 1, F::forward(1, Keep::All));
  EXPECT_NE(refusal(units, twice).find("backward-phase op 1 (forward(1, keep=all)) cannot run: its output x_2 is still stored"),
            std::string::npos)
      << refusal(units, twice);

  // A backward needs the unit's activations.
  ChainSchedule unkept = full_schedule(4);
  unkept.backward.erase(unkept.backward.begin() + 1);  // the recomputation of unit 2
  EXPECT_NE(refusal(units, unkept).find("unit 2's activations are not kept"), std::string::npos) << refusal(units, unkept);

  // The forward phase is the plain forward pass, ending with the loss unit keeping everything.
  ChainSchedule skipped = none_schedule(4);
  skipped.forward.erase(skipped.forward.begin() + 1);
  EXPECT_NE(refusal(units, skipped).find("forward phase has 3 ops for a chain of 4 units"), std::string::npos);
  ChainSchedule loss_dropped = none_schedule(4);
  loss_dropped.forward[3].keep = Keep::Input;
  EXPECT_NE(refusal(units, loss_dropped).find("the loss unit's forward"), std::string::npos);
  ChainSchedule recompute_first = full_schedule(4);
  recompute_first.backward.insert(recompute_first.backward.begin(), F::forward(2, Keep::All));
  EXPECT_NE(refusal(units, recompute_first).find("starts with forward(2, keep=all), expected backward(3)"),
            std::string::npos);
  ChainSchedule extra = none_schedule(4);
  extra.backward.push_back(F::backward(0));
  EXPECT_NE(refusal(units, extra).find("backward-phase op 4"), std::string::npos) << refusal(units, extra);
}

TEST(ChainSimulate, RefusesBrokenChains) {
  auto units = hand_chain();
  units[1].output_bytes = 6;
  EXPECT_NE(refusal(units, none_schedule(4)).find("unit 1 outputs 6 bytes but unit 2 reads 5 bytes"), std::string::npos);
  units = hand_chain();
  units[2].own_bytes = -1;
  EXPECT_NE(refusal(units, none_schedule(4)).find("chain unit 2 has a negative size"), std::string::npos);
  EXPECT_NE(refusal({}, none_schedule(1)).find("at least one unit"), std::string::npos);
}

// n = 6: units 0..4 are cut into [0, 1], [2, 3], [4]; the loss unit stays out.
TEST(RecomputePolicies, EveryKOps) {
  const ChainSchedule s = every_k_schedule(6, 2);
  EXPECT_EQ(s.forward, (std::vector<ChainOp>{F::forward(0, Keep::Input), F::forward(1, Keep::Nothing),
                                             F::forward(2, Keep::Input), F::forward(3, Keep::Nothing),
                                             F::forward(4, Keep::Input), F::forward(5, Keep::All)}));
  EXPECT_EQ(s.backward,
            (std::vector<ChainOp>{F::backward(5), F::forward(4, Keep::All), F::backward(4), F::forward(2, Keep::All),
                                  F::forward(3, Keep::All), F::backward(3), F::backward(2), F::forward(0, Keep::All),
                                  F::forward(1, Keep::All), F::backward(1), F::backward(0)}));
  EXPECT_EQ(full_schedule(6), every_k_schedule(6, 1));
  EXPECT_EQ(every_k_schedule(6, 5), every_k_schedule(6, 50));
  EXPECT_THROW(every_k_schedule(6, 0), Error);
  EXPECT_THROW(none_schedule(0), Error);
}

TEST(RecomputePolicies, NamesAndEntryPoint) {
  for (RecomputePolicy p : {RecomputePolicy::None, RecomputePolicy::Selective, RecomputePolicy::Full,
                            RecomputePolicy::EveryK, RecomputePolicy::Optimal})
    EXPECT_EQ(parse_recompute_policy(recompute_policy_name(p)), p);
  EXPECT_EQ(parse_recompute_policy("every_k"), RecomputePolicy::EveryK);
  try {
    parse_recompute_policy("sqrt");
    FAIL() << "an unknown policy name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("none, selective, full, every_k, optimal"), std::string::npos) << e.what();
  }
  const auto units = hand_chain();
  EXPECT_EQ(plan_recompute(RecomputePolicy::Selective, units, 0, 0), none_schedule(4));
  EXPECT_EQ(plan_recompute(RecomputePolicy::None, units, 0, 0), none_schedule(4));
  EXPECT_EQ(plan_recompute(RecomputePolicy::Full, units, 0, 0), full_schedule(4));
  EXPECT_EQ(plan_recompute(RecomputePolicy::EveryK, units, 2, 0), every_k_schedule(4, 2));
  EXPECT_LE(simulate(units, plan_recompute(RecomputePolicy::Optimal, units, 0, 30)).peak_bytes, 30);
}
