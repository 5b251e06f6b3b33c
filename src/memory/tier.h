#pragma once
// Where a tensor's storage lives. Compute memory is where kernels run (RAM on the CPU backend,
// device memory on a GPU); host is RAM (pinned on a GPU machine, so copies to the device can
// overlap compute); nvme is a file in the run's offload folder. Moves between tiers are
// asynchronous jobs on a copy engine (copy_engine.h), waited for where the data is read.
#include <cstdint>
#include <string_view>

namespace tessera::memory {

enum class Tier : std::uint8_t { Compute, Host, Nvme };
std::string_view tier_name(Tier tier);  // "compute", "host", "nvme"

}  // namespace tessera::memory
