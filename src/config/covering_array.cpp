#include "config/covering_array.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <span>

#include "core/check.h"

namespace tessera::config {

namespace {

using F = Feature;

constexpr int kMaxWorld = 8;
// The budget of the planned policies (optimal, DTR, Checkmate) for the array's tiny model (four
// blocks of width 32 over 32 tokens): above the least each schedules on any of the array's layouts,
// which holds most of a small rank's activations. Beside offloading, the plan offloads within it;
// where activations stay in compute memory, the runner (tests/train/covering_array_run.cpp) lowers
// it to just above the least the program names for the configuration, where the policy recomputes.
constexpr std::string_view kActivationBudgetMb = "0.3";

bool data_parallel_needed(const FeatureSettings& s) {
  return s.zero_stage > 0 || s.ep > 1 || s.compression != CompressionMethod::None || s.grad_dtype != "fp32" ||
         s.optimizer == OptimizerKind::OneBitAdam;
}

size_t index_of(Feature f) { return static_cast<size_t>(f); }

bool runs_pair(Feature a, Feature b) {
  const Cell c = cell(a, b);
  return a != b && !c.same_key && c.refused_by.empty();
}

bool same_pair(const std::pair<Feature, Feature>& p, Feature a, Feature b) {
  return (p.first == a && p.second == b) || (p.first == b && p.second == a);
}

}  // namespace

int array_data_parallel(const FeatureSettings& s) { return data_parallel_needed(s) ? 2 : 1; }
int array_world(const FeatureSettings& s) { return s.tp * s.pp * array_data_parallel(s); }

std::vector<std::pair<std::string, std::string>> array_overrides(const FeatureSettings& s) {
  const FeatureSettings d;
  std::vector<std::pair<std::string, std::string>> out;
  const auto add = [&](std::string key, std::string value) { out.emplace_back(std::move(key), std::move(value)); };
  add("parallel.dp", std::to_string(array_data_parallel(s)));
  if (s.tp != d.tp) add("parallel.tp", std::to_string(s.tp));
  if (s.sp) add("parallel.sp", "true");
  if (s.ep != d.ep) add("parallel.ep", std::to_string(s.ep));
  if (s.pp != d.pp) add("parallel.pp", std::to_string(s.pp));
  if (s.zero_stage != d.zero_stage) add("parallel.zero_stage", std::to_string(s.zero_stage));
  if (s.schedule != d.schedule) add("parallel.schedule", std::string(schedule_name(s.schedule)));
  if (s.schedule == ScheduleKind::Interleaved) add("parallel.virtual_stages", "2");
  // The uniform delay: the same arithmetic on any number of stages, so one process is its reference.
  if (s.schedule == ScheduleKind::PipeDream2BW) add("parallel.weight_version", "delayed");
  if (s.compression != d.compression) {
    // As the compressors' parity test trains them (compression_test.cpp): two exact warm-up steps,
    // then a tenth of each bucket (top-k) or rank 2 (PowerSGD).
    add("parallel.compression", std::string(compression_name(s.compression)));
    add("compression.warmup_steps", "2");
    if (s.compression == CompressionMethod::TopK) add("compression.ratio", "0.1");
    if (s.compression == CompressionMethod::PowerSgd) add("compression.rank", "2");
  }
  if (s.grad_dtype != d.grad_dtype) add("parallel.grad_dtype", s.grad_dtype);
  if (s.compute != d.compute) add("precision.compute", s.compute);
  if (s.recompute != d.recompute) add("memory.recompute", std::string(recompute_policy_name(s.recompute)));
  if (recompute_takes_budget(s.recompute)) {
    add("memory.activation_budget_mb", std::string(kActivationBudgetMb));
  }
  if (s.activation_encoding != d.activation_encoding) add("memory.activation_encoding", s.activation_encoding);
  if (s.offload_activations != d.offload_activations) add("memory.offload_activations", s.offload_activations);
  if (s.offload_optimizer != d.offload_optimizer) add("memory.offload_optimizer", s.offload_optimizer);
  if (s.offload_params != d.offload_params) add("memory.offload_params", s.offload_params);
  if (s.optimizer != d.optimizer) add("optim.name", std::string(optimizer_name(s.optimizer)));
  // Three AdamW steps, then compressed ones, as its parity test runs it (one_bit_adam_test.cpp).
  if (s.optimizer == OptimizerKind::OneBitAdam) add("optim.freeze_step", "3");
  // GPT-2's attention key bias has a zero gradient up to rounding, which Adafactor's unfactored
  // second moment turns into a unit update; its parity tests train the Llama model, which has no
  // biases (optimizer_parity_test.cpp), and so does the array.
  if (s.optimizer == OptimizerKind::Adafactor) add("model.arch", "llama");
  if (s.delayed_update_after != d.delayed_update_after) {
    add("optim.delayed_update_after", std::to_string(s.delayed_update_after));
  }
  if (s.moe_experts != d.moe_experts) add("model.moe_experts", std::to_string(s.moe_experts));
  return out;
}

FeatureSettings array_reference(const FeatureSettings& s) {
  FeatureSettings r;
  r.moe_experts = s.moe_experts;
  r.optimizer = s.optimizer == OptimizerKind::OneBitAdam ? OptimizerKind::AdamW : s.optimizer;
  if (s.schedule == ScheduleKind::PipeDream2BW) r.schedule = s.schedule;
  r.delayed_update_after = s.delayed_update_after;
  return r;
}

double array_loss_bound(ArrayTolerance t) {
  switch (t) {
    case ArrayTolerance::Exact: return 1e-5;             // parity_harness.h: check_matches_reference
    case ArrayTolerance::ShardedEightBit: return 1e-5;   // the exact bound, on the losses only
    case ArrayTolerance::Compressed: return 0.005;       // compression_test.cpp: within 0.5% of the dense run
    case ArrayTolerance::CompressedAdafactor: return 0.01;  // the header says why
    case ArrayTolerance::OneBitAdam: return 0.01;        // one_bit_adam_test.cpp: within 1% of AdamW
    case ArrayTolerance::MixedPrecision: return 0.02;    // precision_test.cpp: within 2% of fp32
    case ArrayTolerance::LossyEncoding: return 0.02;     // test_activation_encoding.cpp: within 2%
  }
  TS_FAIL("unknown tolerance {}", static_cast<int>(t));
}

ArrayTolerance array_tolerance(const FeatureSettings& s) {
  ArrayTolerance t = ArrayTolerance::Exact;
  // The enum lists the classes from the strictest to the loosest.
  const auto loosen = [&](ArrayTolerance u) {
    if (u > t) t = u;
  };
  if (s.compression != CompressionMethod::None) {
    loosen(s.optimizer == OptimizerKind::Adafactor ? ArrayTolerance::CompressedAdafactor : ArrayTolerance::Compressed);
  }
  if (s.optimizer == OptimizerKind::OneBitAdam) loosen(ArrayTolerance::OneBitAdam);
  if (s.compute != "fp32" || s.grad_dtype != "fp32") loosen(ArrayTolerance::MixedPrecision);
  if (s.activation_encoding == "gist" || s.activation_encoding == "fp8") loosen(ArrayTolerance::LossyEncoding);
  if (s.optimizer == OptimizerKind::Adam8bit && (s.tp > 1 || s.ep > 1)) loosen(ArrayTolerance::ShardedEightBit);
  return t;
}

bool array_proves(const FeatureSettings& s, Feature a, Feature b) {
  if (!feature_holds(a, s) || !feature_holds(b, s)) return false;
  return array_tolerance(s) == ArrayTolerance::Exact || array_tolerance(pair_settings(a, b)) != ArrayTolerance::Exact;
}

std::vector<ArrayConfiguration> covering_array(const std::function<bool(const FeatureSettings&)>& runs) {
  const std::span<const Feature> features = all_features();
  std::array<std::array<bool, kFeatureCount>, kFeatureCount> lossy_pair{};  // not exact by itself
  for (Feature a : features) {
    for (Feature b : features) {
      lossy_pair[index_of(a)][index_of(b)] = array_tolerance(pair_settings(a, b)) != ArrayTolerance::Exact;
    }
  }
  std::array<std::array<bool, kFeatureCount>, kFeatureCount> open{};  // runs, not covered yet
  size_t left = 0;
  for (Feature a : features) {
    for (Feature b : features) {
      if (a < b && runs_pair(a, b)) {
        open[index_of(a)][index_of(b)] = true;
        ++left;
      }
    }
  }
  const auto open_pairs = [&](const FeatureSettings& s) {
    std::vector<Feature> on;
    for (Feature f : features) {
      if (feature_holds(f, s)) on.push_back(f);
    }
    const bool exact = array_tolerance(s) == ArrayTolerance::Exact;
    size_t n = 0;
    for (size_t i = 0; i < on.size(); ++i) {
      for (size_t j = i + 1; j < on.size(); ++j) {
        const size_t a = index_of(on[i]), b = index_of(on[j]);
        n += open[a][b] && (exact || lossy_pair[a][b]);
      }
    }
    return n;
  };
  // The features a configuration was given keep holding (a default, AdamW or 1F1B, may give way),
  // and it still proves the pair it started from.
  const auto acceptable = [&](const FeatureSettings& s, const std::vector<Feature>& chosen) {
    for (Feature f : chosen) {
      if (!feature_holds(f, s)) return false;
    }
    return array_proves(s, chosen[0], chosen[1]) && array_world(s) <= kMaxWorld && refusals_of(s).empty() && runs(s);
  };

  std::vector<ArrayConfiguration> array;
  while (left > 0) {
    Feature seed_a{}, seed_b{};
    bool found = false;
    for (size_t i = 0; i < kFeatureCount && !found; ++i) {
      for (size_t j = i + 1; j < kFeatureCount && !found; ++j) {
        if (open[i][j]) {
          seed_a = features[i];
          seed_b = features[j];
          found = true;
        }
      }
    }
    std::vector<Feature> chosen = {seed_a, seed_b};
    FeatureSettings s = pair_settings(seed_a, seed_b);
    TS_CHECK(acceptable(s, chosen), "the matrix says {} with {} runs, but the run config refuses the pair",
             feature_name(seed_a), feature_name(seed_b));
    for (;;) {
      const size_t have = open_pairs(s);
      double best_score = 0.0;
      std::optional<Feature> best;
      FeatureSettings best_settings;
      for (Feature f : features) {
        if (feature_holds(f, s)) continue;
        const FeatureSettings next = with_feature(s, f);
        if (!feature_holds(f, next)) continue;
        std::vector<Feature> with_f = chosen;
        with_f.push_back(f);
        const size_t gain = open_pairs(next);
        if (gain <= have) continue;
        // New pairs per process the configuration will take: a larger world must pay for itself.
        const double score = static_cast<double>(gain - have) * array_world(s) / array_world(next);
        if (score <= best_score || !acceptable(next, with_f)) continue;
        best_score = score;
        best = f;
        best_settings = next;
      }
      if (!best) break;
      chosen.push_back(*best);
      s = best_settings;
    }

    ArrayConfiguration c;
    c.id = static_cast<int>(array.size()) + 1;
    c.settings = s;
    c.dp = array_data_parallel(s);
    c.world = array_world(s);
    for (Feature f : features) {
      if (feature_holds(f, s)) c.features.push_back(f);
    }
    for (size_t i = 0; i < c.features.size(); ++i) {
      for (size_t j = i + 1; j < c.features.size(); ++j) {
        bool& o = open[index_of(c.features[i])][index_of(c.features[j])];
        if (!o || !array_proves(s, c.features[i], c.features[j])) continue;
        o = false;
        --left;
        c.first_covered.emplace_back(c.features[i], c.features[j]);
      }
    }
    array.push_back(std::move(c));
  }

  // The CI subset: every pair that runs with the default optimizer or the default schedule, each
  // configuration taken where it covers the most such pairs still open (ties: the smaller world,
  // then the earlier configuration).
  const auto is_default = [](Feature f) { return f == F::AdamW || f == F::OneFOneB; };
  std::vector<std::pair<Feature, Feature>> wanted;
  for (Feature a : features) {
    for (Feature b : features) {
      if (a < b && (is_default(a) || is_default(b)) && runs_pair(a, b)) wanted.emplace_back(a, b);
    }
  }
  const auto holds_pair = [](const ArrayConfiguration& c, const std::pair<Feature, Feature>& p) {
    return array_proves(c.settings, p.first, p.second);
  };
  while (!wanted.empty()) {
    ArrayConfiguration* best = nullptr;
    size_t best_count = 0;
    for (ArrayConfiguration& c : array) {
      if (c.ci) continue;
      const size_t n = static_cast<size_t>(
          std::count_if(wanted.begin(), wanted.end(), [&](const auto& p) { return holds_pair(c, p); }));
      if (n > best_count || (n == best_count && n > 0 && best != nullptr && c.world < best->world)) {
        best = &c;
        best_count = n;
      }
    }
    TS_CHECK(best != nullptr, "no configuration of the array covers {} with {}", feature_name(wanted.front().first),
             feature_name(wanted.front().second));
    best->ci = true;
    std::erase_if(wanted, [&](const auto& p) { return holds_pair(*best, p); });
  }
  return array;
}

const ArrayConfiguration* covering_configuration(std::span<const ArrayConfiguration> array, Feature a, Feature b) {
  for (const ArrayConfiguration& c : array) {
    for (const auto& p : c.first_covered) {
      if (same_pair(p, a, b)) return &c;
    }
  }
  return nullptr;
}

}  // namespace tessera::config
