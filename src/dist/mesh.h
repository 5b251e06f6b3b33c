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
  // A mesh of groups made elsewhere: this rank's group of each dimension of `layout`, in kMeshDims
  // order. For a stand-in world that plays one rank of a job whose other ranks are absent, where
  // no split can find the members (bench/zero_memory.cpp). Checks each group's size.
  Mesh(Communicator& world, const config::ParallelLayout& layout,
       std::array<std::unique_ptr<Communicator>, kMeshDims.size()> groups);

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
