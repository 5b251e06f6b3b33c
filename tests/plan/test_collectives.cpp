// Alpha-beta ring costs, group placement, and the pipeline closed forms.
#include <gtest/gtest.h>

#include "plan/collectives.h"
#include "plan/pipeline_model.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using config::ScheduleKind;
using test_util::pipeline_layout;

TEST(PlanCollectives, RingFormulas) {
  Group g{8, Link{100e9, 5e-6}};
  const double S = 1e9;
  EXPECT_DOUBLE_EQ(all_reduce_seconds(g, S), 2 * 7 * 5e-6 + 2 * 7.0 / 8 * S / 100e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(g, S), 7 * 5e-6 + 7.0 / 8 * S / 100e9);
  EXPECT_DOUBLE_EQ(all_gather_seconds(g, S), reduce_scatter_seconds(g, S));
  EXPECT_DOUBLE_EQ(p2p_seconds(g.link, S), 5e-6 + S / 100e9);
  EXPECT_EQ(all_reduce_seconds(Group{1, g.link}, S), 0.0);  // one member: nothing moves
}

TEST(PlanCollectives, GroupsRingOverTheRightLink) {
  ClusterSpec c = test_util::a100();
  const double eff = c.efficiency.link;
  Layout l;
  l.tp = 8;
  l.dp = 4;
  l.pp = 2;
  Placement p = place(l, c);
  // tp = 8 fills a node: NVLink.
  EXPECT_DOUBLE_EQ(p.tp.link.bandwidth, c.intra_node.bandwidth * eff);
  EXPECT_DOUBLE_EQ(p.tp.link.latency, c.intra_node.latency);
  // dp members sit one per node: one NIC each.
  EXPECT_DOUBLE_EQ(p.dp.link.bandwidth, c.inter_node.bandwidth * eff);
  EXPECT_DOUBLE_EQ(p.dp.link.latency, c.inter_node.latency);
  EXPECT_TRUE(p.pp_crosses_nodes);
  EXPECT_DOUBLE_EQ(p.pp.bandwidth, c.inter_node.bandwidth * eff);

  // tp = 2, dp = 4: the dp group lives inside one node.
  Layout small;
  small.tp = 2;
  small.dp = 4;
  EXPECT_DOUBLE_EQ(place(small, c).dp.link.bandwidth, c.intra_node.bandwidth * eff);
  // tp = 2, dp = 16: four dp members per node share the ring across nodes through four NICs.
  small.dp = 16;
  EXPECT_DOUBLE_EQ(place(small, c).dp.link.bandwidth, 4 * c.inter_node.bandwidth * eff);
  EXPECT_DOUBLE_EQ(place(small, c).dp.link.latency, c.inter_node.latency);
  // tp = 1, dp = 32: eight NICs would exceed NVLink; the ring is capped by the slower of the two.
  small.tp = 1;
  small.dp = 32;
  EXPECT_DOUBLE_EQ(place(small, c).dp.link.bandwidth, std::min(8 * c.inter_node.bandwidth, c.intra_node.bandwidth) * eff);
  // Stages of a small layout share a node.
  Layout local;
  local.tp = 2;
  local.pp = 4;
  EXPECT_FALSE(place(local, c).pp_crosses_nodes);
  EXPECT_DOUBLE_EQ(place(local, c).pp.bandwidth, c.intra_node.bandwidth * eff);
}

TEST(PlanPipelineModel, BubbleClosedForms) {
  // 1F1B: (p - 1)/m; interleaved: (p - 1)/(v m); GPipe the same as 1F1B against the ideal time.
  EXPECT_DOUBLE_EQ(closed_form_bubble_fraction(pipeline_layout(ScheduleKind::OneFOneB, 8, 64)), 7.0 / 64);
  EXPECT_DOUBLE_EQ(closed_form_bubble_fraction(pipeline_layout(ScheduleKind::Interleaved, 8, 64, 4)), 7.0 / 256);
  EXPECT_DOUBLE_EQ(closed_form_bubble_fraction(pipeline_layout(ScheduleKind::GPipe, 8, 64)), 7.0 / 64);
  EXPECT_DOUBLE_EQ(closed_form_bubble_fraction(pipeline_layout(ScheduleKind::OneFOneB, 1, 64)), 0.0);
  // ZB-H1 idles (p - 1) t_f against 1F1B's (p - 1)(t_f + t_b): a third of it at t_b = 2 t_f.
  EXPECT_DOUBLE_EQ(closed_form_bubble_fraction(pipeline_layout(ScheduleKind::ZeroBubbleH1, 8, 64)), 7.0 / 192);
  const StageTimes t{1.0, 2.0, 0.0};
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::ZeroBubbleH1, 4, 8), t), 8 * 3.0 + 3 * 1.0);
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::OneFOneB, 4, 8), t), 11 * 3.0);
  // Below p microbatches the formula does not hold: 1F1B's.
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::ZeroBubbleH1, 4, 2), t),
                   closed_form_makespan(pipeline_layout(ScheduleKind::OneFOneB, 4, 2), t));
}

TEST(PlanPipelineModel, MakespanIsBatchTimeFormula) {
  // Narayanan et al.: (b'/b + p - 1)(t_f + t_b) for 1F1B; interleaving divides the p - 1 by v.
  StageTimes t{1.0, 2.0, 0.0};
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::OneFOneB, 4, 16), t), (16 + 3) * 3.0);
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::Interleaved, 4, 16, 2), t), (16 + 1.5) * 3.0);
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::OneFOneB, 1, 16), t), 16 * 3.0);
  // Each chunk of each microbatch pays a transfer forward and one backward: 2 v per microbatch.
  StageTimes with_p2p{1.0, 2.0, 0.1};
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::Interleaved, 4, 16, 2), with_p2p),
                   (16 + 1.5) * (3.0 + 0.4));
  EXPECT_DOUBLE_EQ(closed_form_makespan(pipeline_layout(ScheduleKind::GPipe, 4, 16), with_p2p), (16 + 3) * 3.2);
}

TEST(PlanPipelineModel, InflightCountsFollowMegatronWarmup) {
  // 1F1B: stage r holds p - r microbatches (fewer when m is smaller).
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::OneFOneB, 8, 64), 0), 8);
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::OneFOneB, 8, 64), 7), 1);
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::OneFOneB, 8, 3), 0), 3);
  // Interleaved: 2 (p - r - 1) + (v - 1) p warm-up chunks plus one.
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::Interleaved, 4, 16, 2), 0), 6 + 4 + 1);
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::Interleaved, 4, 16, 2), 3), 0 + 4 + 1);
  EXPECT_EQ(closed_form_inflight_chunks(pipeline_layout(ScheduleKind::GPipe, 4, 16), 2), 16);
}
