#pragma once
// Textbook bubble formulas, for printing next to simulated results and for tests. Each holds for
// uniform costs and zero point-to-point time.
#include <optional>
#include <string>

#include "schedule/instruction.h"

namespace tessera::plan {

struct ClosedFormBubble {
  double fraction = 0.0;  // idle / total time of each rank
  std::string formula;    // how it was computed, e.g. "(p-1)/(m+p-1)"
};

// forward, backward (full) and weight (its weight-gradient share) are per microbatch for a rank's
// whole share of the model, as in uniform_costs. Empty when no closed form is known for the case.
std::optional<ClosedFormBubble> closed_form_bubble(const pipeline::Schedule& schedule, double forward,
                                                   double backward, double weight);

}  // namespace tessera::plan
