#pragma once
// Mesh: this rank's communicators for every dimension of a parallel layout, split from the world
// by the pure group generator of dist/rank_groups.h. Parallel transforms receive the Mesh (or
// the one group they need) by reference; nothing about the layout is global.
#include <array>
#include <memory>

#include "dist/communicator.h"
#include "dist/rank_groups.h"

namespace tessera::dist {

class Mesh {
 public:
  // Collective over `world`: every rank calls it with the same layout. Validates the layout's
  // factors against the world size first (on every rank alike, so a bad layout fails everywhere);
  // its batch and schedule are for their users to check. `world` must outlive the Mesh.
  Mesh(Communicator& world, const config::ParallelLayout& layout);

  const config::ParallelLayout& layout() const { return layout_; }
  const Coordinates& coords() const { return coords_; }
  Communicator& world() const { return world_; }
  Communicator& group(MeshDim dim) const { return *groups_[static_cast<size_t>(dim)]; }
  Communicator& dp() const { return group(MeshDim::DP); }
  Communicator& pp() const { return group(MeshDim::PP); }
  Communicator& tp() const { return group(MeshDim::TP); }
  Communicator& ep() const { return group(MeshDim::EP); }
  Communicator& edp() const { return group(MeshDim::EDP); }

 private:
  Communicator& world_;
  config::ParallelLayout layout_;
  Coordinates coords_;
  std::array<std::unique_ptr<Communicator>, kMeshDims.size()> groups_;
};

}  // namespace tessera::dist
