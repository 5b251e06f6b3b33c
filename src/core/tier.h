#pragma once
// Where a tensor's bytes live (DESIGN.md, "Memory has tiers"):
//   compute  where kernels run: RAM on the CPU backend, device memory on a GPU backend;
//   host     RAM (pinned on a GPU machine); on the CPU backend the same memory as compute, but
//            nothing may assume so;
//   nvme     files in the run's offload folder (memory/nvme_store.h).
// Kernels read and write only the compute tier; moves between tiers are asynchronous operations
// on a copy engine (memory/copy_engine.h), waited for where the moved tensor is read.
#include <cstdint>
#include <string_view>

namespace tessera {

enum class Tier : uint8_t { Compute, Host, Nvme };
inline constexpr size_t kTierCount = 3;

constexpr std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::Compute: return "compute";
    case Tier::Host: return "host";
    case Tier::Nvme: return "nvme";
  }
  return "?";
}

}  // namespace tessera
