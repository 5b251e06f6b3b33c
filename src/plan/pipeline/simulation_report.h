#pragma once
// The small table `tessera simulate` prints: total time, bubble next to its closed form, and the
// per-rank busy time, bubble and peak memory.
#include <optional>
#include <string>

#include "schedule/instruction.h"
#include "schedule/validator.h"
#include "plan/pipeline/closed_form.h"
#include "plan/pipeline/simulator.h"

namespace tessera::plan {

std::string simulation_report(const pipeline::Schedule& schedule, const pipeline::ValidationReport& validation,
                              const SimulationResult& result, const std::optional<ClosedFormBubble>& closed_form);

// One line for picture captions: "bubble 27.27 % (closed form 27.27 %), total time 33, ...".
std::string simulation_caption(const SimulationResult& result, const std::optional<ClosedFormBubble>& closed_form);

}  // namespace tessera::plan
