#pragma once
// The recompute chain of a run of the model's units, from the engine's per-unit activation bytes
// (config/activation_bytes.h): one rule for the runtime, which plans what it executes
// (exec::stage_chain), and for the planner, which predicts it (plan::engine_chain), so the two
// cannot drift apart.
#include <span>
#include <vector>

#include "config/activation_bytes.h"
#include "memory/chain.h"

namespace tessera::memory {

// `units`: the model's unit ids in chain order (each reads the output of the unit before it in the
// model, bytes[u - 1].output); `bytes`, `forward_time` and `backward_time` are indexed by unit id.
// With `selective`, each unit drops what selective recomputation rebuilds in its backward; without,
// each unit that has such a part offers it as Keep::Selective's (rebuild_time the rebuild's time,
// indexed like forward_time), for a schedule to choose unit by unit.
// `sent_on`: the run ends where its output is sent to the next pipeline stage (the stage holds no
// head): the last unit's output is held only while its forward runs (it travels in a comm buffer),
// and a unit of no bytes and no time closes the chain, so that the last unit is checkpointed like
// the others instead of kept whole (the runtime runs nothing for it).
std::vector<ChainUnit> chain_of_units(std::span<const config::UnitActivationBytes> bytes, std::span<const int> units,
                                      bool selective, std::span<const double> forward_time,
                                      std::span<const double> backward_time, std::span<const double> rebuild_time,
                                      bool sent_on);

}  // namespace tessera::memory
