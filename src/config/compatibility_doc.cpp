// docs/compatibility.md, printed from the table (`tessera compatibility`).
#include <fmt/format.h>

#include <algorithm>

#include "config/compatibility.h"
#include "config/covering_array.h"

namespace tessera::config {

namespace {

size_t number_of(Feature f) { return static_cast<size_t>(f) + 1; }

size_t rule_number(const Refusal* r) {
  const std::span<const Refusal> all = refusals();
  return static_cast<size_t>(r - all.data()) + 1;
}

std::string code(std::string_view text) { return fmt::format("`{}`", text); }

std::string joined(const std::vector<Feature>& features, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < features.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == features.size() ? last : ", ", code(feature_name(features[i])));
  }
  return out;
}

std::string cell_text(Feature a, Feature b, const Cell& c, std::span<const ArrayConfiguration> array) {
  if (a == b) return "·";
  if (c.same_key) return "–";
  if (c.refused_by.empty()) {
    return c.tested != nullptr || covering_configuration(array, a, b) != nullptr ? "✓" : "○";
  }
  std::string out = "✗";
  for (size_t i = 0; i < c.refused_by.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ",", rule_number(c.refused_by[i]));
  }
  return out;
}

// The pairs a rule refuses without naming them: a feature that brings another (sp brings tp, ep
// brings MoE) meets the other's refusals.
std::vector<std::pair<Feature, Feature>> indirect_pairs(const Refusal& r) {
  std::vector<std::pair<Feature, Feature>> out;
  const auto named = [](const std::vector<Feature>& side, Feature f) {
    return std::find(side.begin(), side.end(), f) != side.end();
  };
  const std::span<const Feature> features = all_features();
  for (size_t i = 0; i < features.size(); ++i) {
    for (size_t j = i + 1; j < features.size(); ++j) {
      const Feature a = features[i], b = features[j];
      const Cell c = cell(a, b);
      if (std::find(c.refused_by.begin(), c.refused_by.end(), &r) == c.refused_by.end()) continue;
      const bool direct = (named(r.first, a) && named(r.second, b)) || (named(r.first, b) && named(r.second, a));
      if (!direct) out.emplace_back(a, b);
    }
  }
  return out;
}

std::string settings_text(const ArrayConfiguration& c) {
  std::string out;
  for (const auto& [key, value] : array_overrides(c.settings)) {
    out += fmt::format("{}`{} = {}`", out.empty() ? "" : " ", key, value);
  }
  return out;
}

std::string_view tolerance_text(ArrayTolerance t) {
  switch (t) {
    case ArrayTolerance::Exact: return "exact";
    case ArrayTolerance::ShardedEightBit: return "8-bit blocks per shard, losses exact";
    case ArrayTolerance::Compressed: return "compressed, 0.5%";
    case ArrayTolerance::CompressedAdafactor: return "compressed under Adafactor, 1%";
    case ArrayTolerance::OneBitAdam: return "1-bit Adam, 1%";
    case ArrayTolerance::MixedPrecision: return "16-bit, 2%";
    case ArrayTolerance::LossyEncoding: return "lossy encoding, 2%";
  }
  return "";
}

std::string covering_array_markdown(std::span<const ArrayConfiguration> array) {
  std::string md = "\n## Covering array\n\n";
  md += "A pairwise covering array of this table (`src/config/covering_array.cpp`, built from the table and\n"
        "the run config's checks): in its configurations every pair that runs meets at least once, each on\n"
        "the fewest processes that hold it (tp × pp × dp, dp 2 where a feature needs data parallelism). Each\n"
        "trains a tiny model (4 blocks of width 32, 32 tokens, batch 8, 6 steps) under `tessera launch -n\n"
        "<processes>` and is held against the one-process run of the same model and optimizer (2BW and the\n"
        "delayed update keep their own arithmetic there; 1-bit Adam is held against AdamW): exact\n"
        "transforms within 1e-5 of every loss and 1e-4 of the final parameters, lossy ones within the bound\n"
        "their parity test states on every loss (so a pair of two exact transforms counts as trained only\n"
        "in a configuration held exactly). A lossy run whose parameters equal the reference's bit for bit\n"
        "fails: its setting did not act. Adafactor's configurations train the Llama model, as its parity\n"
        "tests do (GPT-2's attention key bias has a zero gradient up to rounding, which Adafactor turns into\n"
        "whole steps); 8-bit Adam under tensor or expert parallelism quantizes each rank's shard in blocks\n"
        "of its own, so those runs are held on their losses alone. The budgeted policies (optimal, DTR,\n"
        "Checkmate) without offloading run at a budget just above the least the program names for the\n"
        "configuration, and fail if they recompute nothing. `tessera compatibility --array` prints\n"
        "the configurations as\n"
        "command lines and every pair's configuration. The configurations marked CI run in `scripts/test.sh`\n"
        "(the ctest `train_covering_array_ci`): every pair with the default optimizer or schedule;\n"
        "`scripts/matrix.sh` runs them all.\n\n";
  size_t ci = 0;
  for (const ArrayConfiguration& c : array) ci += c.ci;
  md += fmt::format("Time, measured on 2026-12-06 on 2 cores that other builds shared (load average 8 to 13): the CI\n"
                    "subset ({} configurations) in 60 s (`ctest --test-dir build/release -R train_covering_array_ci`),\n"
                    "the whole array ({}) in 222 s (`scripts/matrix.sh`), each configuration 1 to 5 s.\n\n",
                    ci, array.size());
  md += "| # | processes | tier | held as | settings | pairs it is the first to train |\n|---:|---:|---|---|---|---|\n";
  for (const ArrayConfiguration& c : array) {
    std::string pairs;
    for (const auto& [a, b] : c.first_covered) {
      pairs += fmt::format("{}{}·{}", pairs.empty() ? "" : ", ", number_of(a), number_of(b));
    }
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", c.id, c.world, c.ci ? "CI" : "matrix",
                      tolerance_text(array_tolerance(c.settings)), settings_text(c), pairs);
  }
  return md;
}

}  // namespace

std::string compatibility_markdown(std::span<const ArrayConfiguration> array) {
  const std::span<const Feature> features = all_features();
  std::string md;
  md += "# Compatibility matrix\n\n";
  md += "<!-- Generated by `tessera compatibility` from src/config/compatibility.cpp: edit the table there and\n"
        "regenerate (tessera compatibility > docs/compatibility.md); a test fails when this file differs. -->\n\n";
  md += "Every combination of the `parallel.*`, `memory.*`, `precision.*` and `optim.*` settings (and\n"
        "`model.moe_experts`, which they meet) either runs or is refused when the config is read, with the\n"
        "reason and the nearest combination that works. The table lives in the code\n"
        "(`src/config/compatibility.cpp`): the run config's refusals and the training engine's come from it,\n"
        "and this page is its output.\n\n";
  md += "A *feature* is one setting away from the default; every schedule and optimizer is one, 1F1B and\n"
        "AdamW included. The matrix is pairwise: a config runs when each of its settings is valid on its own\n"
        "(`parallel.sp` needs `parallel.tp > 1`, `parallel.ep` an MoE model whose experts it divides,\n"
        "`parallel.grad_dtype` data parallelism, ...: the [config reference](../README.md#config-reference))\n"
        "and no two of its features are refused together; no refusal needs three. A feature that needs\n"
        "another brings it along: `parallel.sp = true` runs over `parallel.tp > 1` and `parallel.ep > 1` over\n"
        "`model.moe_experts > 0`, so their rows carry that feature's refusals too. Schedules other than 1F1B\n"
        "run at `parallel.pp = 1` as well (one stage; 2bw then keeps its second weight version, zb-h1 splits\n"
        "each backward, interleaved runs its chunks one after the other), so a schedule's row is about the\n"
        "schedule alone and meets `parallel.pp > 1` in its own column.\n\n";

  size_t runs = 0, tested = 0, by_array = 0, untested = 0, refused = 0, same = 0;
  for (size_t i = 0; i < features.size(); ++i) {
    for (size_t j = i + 1; j < features.size(); ++j) {
      const Cell c = cell(features[i], features[j]);
      if (c.same_key) {
        ++same;
      } else if (!c.refused_by.empty()) {
        ++refused;
      } else {
        ++runs;
        const bool in_array = covering_configuration(array, features[i], features[j]) != nullptr;
        tested += c.tested != nullptr;
        by_array += c.tested == nullptr && in_array;
        untested += c.tested == nullptr && !in_array;
      }
    }
  }
  md += fmt::format("{} features make {} pairs: {} run ({} of them trained against a reference by a parity\n"
                    "test, {} more by the {} configurations of the [covering array](#covering-array), {} untested), {}\n"
                    "are refused, and {} are two values of one setting.\n\n",
                    features.size(), features.size() * (features.size() - 1) / 2, runs, tested, by_array, array.size(),
                    untested, refused, same);

  md += "## Matrix\n\n";
  md += "✓ runs, and a parity test ([below](#tested-pairs)) or a configuration of the [covering\n"
        "array](#covering-array) trains the pair; ○ runs, no test of the pair yet; ✗n refused by\n"
        "[refusal](#refusals) n; – two values of one setting.\n\n";
  md += "| | feature |";
  for (Feature f : features) md += fmt::format(" {} |", number_of(f));
  md += "\n|---:|---|";
  for (size_t i = 0; i < features.size(); ++i) md += ":-:|";
  md += "\n";
  for (Feature a : features) {
    md += fmt::format("| {} | {} |", number_of(a), code(feature_name(a)));
    for (Feature b : features) md += fmt::format(" {} |", cell_text(a, b, cell(a, b), array));
    md += "\n";
  }

  md += "\n## Refusals\n\n";
  md += "Each is refused when the config is read, with this reason and fix (the message names both settings\n"
        "with their values), and by the training engine with the same words.\n\n";
  for (const Refusal& r : refusals()) {
    md += fmt::format("{}. {} with {}: {}. Nearest that works: {}.", rule_number(&r), joined(r.first, " or "),
                      joined(r.second, " or "), r.reason, r.nearest);
    const std::vector<std::pair<Feature, Feature>> indirect = indirect_pairs(r);
    if (!indirect.empty()) {
      md += " Also refused through the feature it brings:";
      for (size_t i = 0; i < indirect.size(); ++i) {
        md += fmt::format("{} {} with {}", i == 0 ? "" : ";", code(feature_name(indirect[i].first)),
                          code(feature_name(indirect[i].second)));
      }
      md += ".";
    }
    md += "\n";
  }

  md += "\n## Tested pairs\n\n";
  md += "The pairs that run and that a parity test trains against a reference (the one-process run, or a\n"
        "reference of the same semantics), by ctest name: `ctest --test-dir build/release -R '<name>'` runs one\n"
        "(the `parallel_*` tests under mpirun with the ranks their name ends in). A test keeps every name here\n"
        "registered. The covering array trains the other pairs marked ✓.\n\n";
  md += "| pair | tests |\n|---|---|\n";
  for (const TestedPair& t : tested_pairs()) {
    std::string names;
    for (std::string_view name : t.tests) names += fmt::format("{}{}", names.empty() ? "" : ", ", code(name));
    md += fmt::format("| {} with {} | {} |\n", code(feature_name(t.a)), code(feature_name(t.b)), names);
  }
  md += covering_array_markdown(array);
  return md;
}

}  // namespace tessera::config
