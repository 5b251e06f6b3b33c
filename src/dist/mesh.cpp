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

Mesh::Mesh(Communicator& world, const config::ParallelLayout& layout,
           std::array<std::unique_ptr<Communicator>, kMeshDims.size()> groups)
    : world_(world), layout_(layout), groups_(std::move(groups)) {
  layout_.validate_world(world.size());
  coords_ = coordinates(layout_, world.rank());
  for (MeshDim dim : kMeshDims) {
    const Communicator* group = groups_[static_cast<size_t>(dim)].get();
    const size_t members = group_of(layout_, dim, world.rank()).size();
    TS_CHECK(group != nullptr && static_cast<size_t>(group->size()) == members,
             "the {} group given for layout {} has {} ranks, not {}", mesh_dim_name(dim), layout_.describe(),
             group == nullptr ? 0 : group->size(), members);
  }
}

}  // namespace tessera::dist
