#include "dist/rank_groups.h"

#include "core/check.h"

namespace tessera::dist {

int Coordinates::index(MeshDim dim) const {
  switch (dim) {
    case MeshDim::DP: return dp;
    case MeshDim::PP: return pp;
    case MeshDim::TP: return tp;
    case MeshDim::EP: return ep;
    case MeshDim::EDP: return edp;
  }
  return 0;
}

Coordinates coordinates(const config::ParallelLayout& layout, int rank) {
  TS_CHECK(rank >= 0 && rank < layout.world_size(), "rank {} is outside the layout {} of {} ranks", rank,
           layout.describe(), layout.world_size());
  Coordinates c;
  c.tp = rank % layout.tp;
  c.dp = (rank / layout.tp) % layout.dp;
  c.pp = rank / (layout.tp * layout.dp);
  c.ep = c.dp % layout.ep;
  c.edp = c.dp / layout.ep;
  return c;
}

int rank_of(const config::ParallelLayout& layout, int dp, int pp, int tp) {
  TS_CHECK(dp >= 0 && dp < layout.dp && pp >= 0 && pp < layout.pp && tp >= 0 && tp < layout.tp,
           "coordinates (dp {}, pp {}, tp {}) are outside the layout {}", dp, pp, tp, layout.describe());
  return tp + layout.tp * (dp + layout.dp * pp);
}

std::vector<int> group_of(const config::ParallelLayout& layout, MeshDim dim, int rank) {
  const Coordinates c = coordinates(layout, rank);
  std::vector<int> group;
  group.reserve(static_cast<size_t>(layout.size(dim)));
  for (int i = 0; i < layout.size(dim); ++i) {
    switch (dim) {
      case MeshDim::DP: group.push_back(rank_of(layout, i, c.pp, c.tp)); break;
      case MeshDim::PP: group.push_back(rank_of(layout, c.dp, i, c.tp)); break;
      case MeshDim::TP: group.push_back(rank_of(layout, c.dp, c.pp, i)); break;
      case MeshDim::EP: group.push_back(rank_of(layout, c.edp * layout.ep + i, c.pp, c.tp)); break;
      case MeshDim::EDP: group.push_back(rank_of(layout, i * layout.ep + c.ep, c.pp, c.tp)); break;
    }
  }
  return group;
}

std::vector<std::vector<int>> rank_groups(const config::ParallelLayout& layout, MeshDim dim) {
  layout.validate_world(layout.world_size());
  std::vector<std::vector<int>> groups;
  std::vector<bool> covered(static_cast<size_t>(layout.world_size()), false);
  // Walking ranks upward and starting a group at each rank not yet covered lists groups in order
  // of their lowest rank.
  for (int r = 0; r < layout.world_size(); ++r) {
    if (covered[static_cast<size_t>(r)]) continue;
    std::vector<int> g = group_of(layout, dim, r);
    for (int member : g) covered[static_cast<size_t>(member)] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace tessera::dist
