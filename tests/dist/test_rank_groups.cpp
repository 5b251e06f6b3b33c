// The layout arithmetic, without MPI: the world-size check's messages, rank groups and coordinates.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "dist/rank_groups.h"

using namespace tessera;
using namespace tessera::dist;
using tessera::config::ParallelLayout;

namespace {

std::string error_of(const ParallelLayout& d, int world) {
  try {
    d.validate_world(world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every rank in exactly one group, every group of the expected size.
void expect_partition(const ParallelLayout& d, MeshDim dim) {
  const auto groups = rank_groups(d, dim);
  std::multiset<int> seen;
  for (const auto& g : groups) {
    EXPECT_EQ(static_cast<int>(g.size()), d.size(dim)) << mesh_dim_name(dim);
    seen.insert(g.begin(), g.end());
  }
  EXPECT_EQ(static_cast<int>(seen.size()), d.world_size());
  for (int r = 0; r < d.world_size(); ++r) EXPECT_EQ(seen.count(r), 1u) << "rank " << r << " in " << mesh_dim_name(dim);
}

}  // namespace

TEST(RankGroups, MismatchNamesEveryFactorAndAFix) {
  ParallelLayout d{.dp = 2, .tp = 2, .pp = 1, .ep = 1};
  const std::string msg = error_of(d, 3);
  EXPECT_NE(msg.find("dp 2 × pp 1 × tp 2 = 4 ≠ world size 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ep 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("choose factors whose product is 3"), std::string::npos) << msg;
  // When pp x tp divides the world, the message proposes the dp that fits.
  const std::string fix = error_of(ParallelLayout{.dp = 3, .tp = 2, .pp = 2}, 8);
  EXPECT_NE(fix.find("use dp 2"), std::string::npos) << fix;
  EXPECT_EQ(error_of(d, 4), "");
}

TEST(RankGroups, RejectsBadFactorsSequenceParallelAndExperts) {
  EXPECT_NE(error_of(ParallelLayout{.dp = 0}, 1).find("dp is 0"), std::string::npos);
  EXPECT_NE(error_of(ParallelLayout{.tp = -1}, 1).find("tp is -1"), std::string::npos);
  const std::string sp = error_of(ParallelLayout{.dp = 2, .sp = true}, 2);
  EXPECT_NE(sp.find("needs tp > 1"), std::string::npos) << sp;
  EXPECT_EQ(error_of(ParallelLayout{.tp = 2, .sp = true}, 2), "");
  const std::string ep = error_of(ParallelLayout{.dp = 6, .ep = 4}, 6);
  EXPECT_NE(ep.find("ep 4 does not divide dp 6"), std::string::npos) << ep;
  // Several problems are reported together.
  const std::string both = error_of(ParallelLayout{.dp = 3, .sp = true, .ep = 2}, 4);
  EXPECT_NE(both.find("= 3 ≠ world size 4"), std::string::npos) << both;
  EXPECT_NE(both.find("ep 2 does not divide dp 3"), std::string::npos) << both;
  EXPECT_NE(both.find("needs tp > 1"), std::string::npos) << both;
}

TEST(RankGroups, MegatronOrderTensorFastestPipelineSlowest) {
  // 16 ranks: tp 2, dp 4, pp 2 (the example of Megatron-LM's initialize_model_parallel, with
  // tp groups [0,1], [2,3], ...; pp groups [0,8], [1,9], ...).
  ParallelLayout d{.dp = 4, .tp = 2, .pp = 2};
  auto tp = rank_groups(d, MeshDim::TP);
  ASSERT_EQ(tp.size(), 8u);
  EXPECT_EQ(tp[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(tp[7], (std::vector<int>{14, 15}));
  auto dp = rank_groups(d, MeshDim::DP);
  ASSERT_EQ(dp.size(), 4u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(dp[1], (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(dp[2], (std::vector<int>{8, 10, 12, 14}));
  auto pp = rank_groups(d, MeshDim::PP);
  ASSERT_EQ(pp.size(), 8u);
  EXPECT_EQ(pp[0], (std::vector<int>{0, 8}));
  EXPECT_EQ(pp[3], (std::vector<int>{3, 11}));
  for (MeshDim dim : kMeshDims) expect_partition(d, dim);
}

TEST(RankGroups, ExpertGroupsAreCarvedFromDataParallelRanks) {
  ParallelLayout d{.dp = 4, .tp = 2, .pp = 1, .ep = 2};
  // dp group {0,2,4,6} splits into ep groups {0,2} and {4,6}; the ranks holding the same experts
  // ({0,4} and {2,6}) form the expert-data-parallel groups.
  auto ep = rank_groups(d, MeshDim::EP);
  ASSERT_EQ(ep.size(), 4u);
  EXPECT_EQ(ep[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(ep[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(ep[2], (std::vector<int>{4, 6}));
  auto edp = rank_groups(d, MeshDim::EDP);
  ASSERT_EQ(edp.size(), 4u);
  EXPECT_EQ(edp[0], (std::vector<int>{0, 4}));
  EXPECT_EQ(edp[1], (std::vector<int>{1, 5}));
  EXPECT_EQ(edp[2], (std::vector<int>{2, 6}));
  for (MeshDim dim : kMeshDims) expect_partition(d, dim);
  // ep == dp: one expert group per dp group, expert-data-parallel groups of one.
  ParallelLayout full{.dp = 2, .ep = 2};
  EXPECT_EQ(rank_groups(full, MeshDim::EP), rank_groups(full, MeshDim::DP));
  EXPECT_EQ(rank_groups(full, MeshDim::EDP).size(), 2u);
}

TEST(RankGroups, CoordinatesRoundTripAndAgreeWithGroups) {
  for (ParallelLayout d : {ParallelLayout{.dp = 3, .tp = 2, .pp = 2}, ParallelLayout{.dp = 4, .tp = 1, .pp = 3, .ep = 2},
                         ParallelLayout{}, ParallelLayout{.dp = 2, .tp = 4, .pp = 2, .ep = 2}}) {
    for (int r = 0; r < d.world_size(); ++r) {
      const Coordinates c = coordinates(d, r);
      EXPECT_EQ(rank_of(d, c.dp, c.pp, c.tp), r);
      EXPECT_EQ(c.ep + d.ep * c.edp, c.dp);
      for (MeshDim dim : kMeshDims) {
        // The rank sits at position index(dim) of its own group.
        const auto g = group_of(d, dim, r);
        ASSERT_LT(c.index(dim), static_cast<int>(g.size()));
        EXPECT_EQ(g[static_cast<size_t>(c.index(dim))], r) << d.describe() << " " << mesh_dim_name(dim);
        // Members of a group differ only in that dimension's coordinate.
        for (int other : g) {
          const Coordinates o = coordinates(d, other);
          if (dim != MeshDim::TP) {
            EXPECT_EQ(o.tp, c.tp);
          }
          if (dim != MeshDim::PP) {
            EXPECT_EQ(o.pp, c.pp);
          }
          if (dim == MeshDim::TP || dim == MeshDim::PP) {
            EXPECT_EQ(o.dp, c.dp);
          }
        }
      }
    }
    for (MeshDim dim : kMeshDims) expect_partition(d, dim);
  }
  EXPECT_THROW(coordinates(ParallelLayout{.dp = 2}, 2), Error);
  EXPECT_THROW(rank_of(ParallelLayout{.dp = 2}, 0, 1, 0), Error);
}
