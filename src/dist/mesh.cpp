#include "dist/mesh.h"

#include "core/check.h"

namespace tessera::dist {

Mesh::Mesh(Communicator& world, const config::ParallelLayout& layout) : world_(world), layout_(layout) {
  layout_.validate_world(world.size());
  coords_ = coordinates(layout_, world.rank());
  for (MeshDim dim : kMeshDims) {
    auto comm = world.split_groups(rank_groups(layout_, dim), std::string(mesh_dim_name(dim)));
    TS_CHECK(comm != nullptr, "rank {} is in no {} group of layout {}", world.rank(), mesh_dim_name(dim),
             layout_.describe());
    groups_[static_cast<size_t>(dim)] = std::move(comm);
  }
}

}  // namespace tessera::dist
