#include "memory/tier.h"

#include "core/check.h"

namespace tessera::memory {

std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::Compute: return "compute";
    case Tier::Host: return "host";
    case Tier::Nvme: return "nvme";
  }
  TS_FAIL("memory tier {} is not one of compute, host, nvme", static_cast<int>(tier));
}

}  // namespace tessera::memory
