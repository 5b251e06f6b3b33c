#include "dist/parallel_dims.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/check.h"

namespace tessera::dist {

std::string_view mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::DP: return "dp";
    case MeshDim::PP: return "pp";
    case MeshDim::TP: return "tp";
    case MeshDim::EP: return "ep";
    case MeshDim::EDP: return "edp";
  }
  return "unknown";
}

int ParallelDims::size(MeshDim dim) const {
  switch (dim) {
    case MeshDim::DP: return dp;
    case MeshDim::PP: return pp;
    case MeshDim::TP: return tp;
    case MeshDim::EP: return ep;
    case MeshDim::EDP: return dp / ep;
  }
  return 1;
}

std::string ParallelDims::describe() const {
  return fmt::format("dp {} × pp {} × tp {} (ep {}, sequence parallel {})", dp, pp, tp, ep,
                     sequence_parallel ? "on" : "off");
}

void ParallelDims::validate(int world) const {
  std::vector<std::string> problems;
  for (auto [name, value] : {std::pair{"dp", dp}, {"pp", pp}, {"tp", tp}, {"ep", ep}}) {
    if (value < 1) problems.push_back(fmt::format("{} is {}, but every factor must be at least 1", name, value));
  }
  if (problems.empty()) {
    // Widened so absurd factors report a product instead of overflowing.
    const long long product = static_cast<long long>(dp) * pp * tp;
    if (product != world) {
      std::string fix;
      if (world % (static_cast<long long>(pp) * tp) == 0) {
        fix = fmt::format("; with pp {} and tp {} use dp {}", pp, tp, world / (pp * tp));
      } else {
        fix = fmt::format("; choose factors whose product is {}", world);
      }
      problems.push_back(fmt::format("dp {} × pp {} × tp {} = {} ≠ world size {} (ep {} is not a factor: expert "
                                     "groups are carved out of the dp ranks){}",
                                     dp, pp, tp, product, world, ep, fix));
    }
    if (dp % ep != 0) {
      problems.push_back(fmt::format("ep {} does not divide dp {}: expert-parallel groups are made of data-parallel "
                                     "ranks, so dp must be a multiple of ep",
                                     ep, dp));
    }
  }
  if (sequence_parallel && tp <= 1) {
    problems.push_back("sequence parallelism splits the sequence across the tensor-parallel group, so it needs tp > 1 "
                       "(set tp >= 2 or turn sequence parallelism off)");
  }
  if (!problems.empty()) {
    TS_FAIL("parallel layout does not fit the world: {}", fmt::join(problems, "; also "));
  }
}

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

Coordinates coordinates(const ParallelDims& dims, int rank) {
  TS_CHECK(rank >= 0 && rank < dims.world_size(), "rank {} is outside the layout {} of {} ranks", rank, dims.describe(),
           dims.world_size());
  Coordinates c;
  c.tp = rank % dims.tp;
  c.dp = (rank / dims.tp) % dims.dp;
  c.pp = rank / (dims.tp * dims.dp);
  c.ep = c.dp % dims.ep;
  c.edp = c.dp / dims.ep;
  return c;
}

int rank_of(const ParallelDims& dims, int dp, int pp, int tp) {
  TS_CHECK(dp >= 0 && dp < dims.dp && pp >= 0 && pp < dims.pp && tp >= 0 && tp < dims.tp,
           "coordinates (dp {}, pp {}, tp {}) are outside the layout {}", dp, pp, tp, dims.describe());
  return tp + dims.tp * (dp + dims.dp * pp);
}

std::vector<int> group_of(const ParallelDims& dims, MeshDim dim, int rank) {
  const Coordinates c = coordinates(dims, rank);
  std::vector<int> group;
  group.reserve(static_cast<size_t>(dims.size(dim)));
  for (int i = 0; i < dims.size(dim); ++i) {
    switch (dim) {
      case MeshDim::DP: group.push_back(rank_of(dims, i, c.pp, c.tp)); break;
      case MeshDim::PP: group.push_back(rank_of(dims, c.dp, i, c.tp)); break;
      case MeshDim::TP: group.push_back(rank_of(dims, c.dp, c.pp, i)); break;
      case MeshDim::EP: group.push_back(rank_of(dims, c.edp * dims.ep + i, c.pp, c.tp)); break;
      case MeshDim::EDP: group.push_back(rank_of(dims, i * dims.ep + c.ep, c.pp, c.tp)); break;
    }
  }
  return group;
}

std::vector<std::vector<int>> rank_groups(const ParallelDims& dims, MeshDim dim) {
  dims.validate(dims.world_size());
  std::vector<std::vector<int>> groups;
  std::vector<bool> covered(static_cast<size_t>(dims.world_size()), false);
  // Walking ranks upward and starting a group at each rank not yet covered lists groups in order
  // of their lowest rank.
  for (int r = 0; r < dims.world_size(); ++r) {
    if (covered[static_cast<size_t>(r)]) continue;
    std::vector<int> g = group_of(dims, dim, r);
    for (int member : g) covered[static_cast<size_t>(member)] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace tessera::dist
