#pragma once
// optim.name: which optimizer a run trains with (the optimizers themselves are in src/optim). The
// kinds and their names live with the config so that what reads configs (the compatibility matrix,
// the covering array) need not link the optimizers.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tessera::config {

enum class OptimizerKind : uint8_t { AdamW, Sgd, Adafactor, Adam8bit, Lamb, Lars, OneBitAdam };

// Every kind, in the order messages list them.
std::span<const OptimizerKind> optimizer_kinds();
// Their names, in the same order: "adamw", "sgd", "adafactor", "adam8bit", "lamb", "lars", "onebit_adam".
std::span<const std::string_view> optimizer_names();
std::string_view optimizer_name(OptimizerKind kind);
std::optional<OptimizerKind> find_optimizer_kind(std::string_view name);
// Refuses an unknown name, listing the known ones.
OptimizerKind parse_optimizer_kind(std::string_view name);

}  // namespace tessera::config
