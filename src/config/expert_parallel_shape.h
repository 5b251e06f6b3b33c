#pragma once
// Whether a model can be split over ep expert-parallel ranks: pure, so the run config (and its
// fuzz target, which links only config and data) can refuse a bad layout when it is read.
#include <optional>
#include <string>

#include "config/model_config.h"

namespace tessera::config {

// Why `model` cannot be split over `ep` ranks (nullopt: it can): it has no experts, or ep does
// not divide their number; the message names the fix.
std::optional<std::string> expert_parallel_refusal(const ModelConfig& model, int ep);

}  // namespace tessera::config
