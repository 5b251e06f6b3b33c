#include "dist/mesh.h"

#include "core/check.h"

namespace tessera::dist {

Mesh::Mesh(Communicator& world, const ParallelDims& dims) : world_(world), dims_(dims) {
  dims_.validate(world.size());
  coords_ = coordinates(dims_, world.rank());
  for (MeshDim dim : kMeshDims) {
    auto comm = world.split_groups(rank_groups(dims_, dim), std::string(mesh_dim_name(dim)));
    TS_CHECK(comm != nullptr, "rank {} is in no {} group of layout {}", world.rank(), mesh_dim_name(dim),
             dims_.describe());
    groups_[static_cast<size_t>(dim)] = std::move(comm);
  }
}

}  // namespace tessera::dist
