#pragma once
// The compatibility matrix: which settings of parallel.*, memory.*, precision.* and optim.* (and
// model.moe_experts, which they meet) run together. Each *feature* is one setting away from the
// default, and every pair of features either runs or is refused by a rule of this table, with the
// reason and the nearest combination that works. The run config refuses a combination from here
// when it is read (train/run_config.cpp), the training engine refuses the same pairs with the same
// words, and docs/compatibility.md is this table printed (`tessera compatibility`; a test keeps
// the two equal). Pure, so that what reads configs (the fuzz target too) need not link the runtime.
//
// The matrix is pairwise: a config runs when every setting is valid on its own and no two of its
// features are refused together. No refusal needs three features.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/compression_method.h"
#include "config/optimizer_kind.h"
#include "config/parallel_layout.h"
#include "config/recompute_policy.h"

namespace tessera::config {

// The settings the matrix reads, as the run config holds them.
struct FeatureSettings {
  int tp = 1;
  bool sp = false;
  int ep = 1;
  int pp = 1;
  int zero_stage = 0;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  CompressionMethod compression = CompressionMethod::None;
  std::string grad_dtype = "fp32";
  std::string compute = "fp32";
  RecomputePolicy recompute = RecomputePolicy::None;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  std::string offload_activations = "none";
  std::string offload_optimizer = "none";
  std::string offload_params = "none";
  std::string activation_encoding = "none";
  int64_t delayed_update_after = 0;
  int64_t moe_experts = 0;
};

// In the order the matrix lists them.
enum class Feature : uint8_t {
  Zero1, Zero2, Zero3, TensorParallel, SequenceParallel, ExpertParallel, Pipeline,
  GPipe, OneFOneB, Interleaved, TwoBW, ZeroBubble,
  TopK, Qsgd, OneBit, PowerSgd,
  RecomputeFull, RecomputeEveryK, RecomputeSelective, RecomputeOptimal, RecomputeDtr, RecomputeCheckmate,
  Bf16, Fp16, GradBf16, GradFp16,
  AdamW, Sgd, Adafactor, Adam8bit, Lamb, Lars, OneBitAdam,
  OffloadActivations, OffloadActivationsAuto, OffloadOptimizer, OffloadParams, DelayedUpdate,
  EncodingLossless, EncodingGist, EncodingFp8,
  Moe,
};
inline constexpr size_t kFeatureCount = static_cast<size_t>(Feature::Moe) + 1;
std::span<const Feature> all_features();

std::string_view feature_name(Feature f);  // `parallel.zero_stage = 3`, `parallel.tp > 1`
std::string_view feature_key(Feature f);   // `parallel.zero_stage`: two features of one key never meet
bool feature_holds(Feature f, const FeatureSettings& s);
// `s` with feature `f` turned on, and what `f` needs to be valid on its own (sp: tp 2; ep: 2
// experts over 2 ranks; offloading planned with recomputation: the optimal policy; offloaded
// parameters: ZeRO-3 and an offloaded optimizer state); dp, batch
// sizes and budgets are the run config's to choose.
FeatureSettings with_feature(FeatureSettings s, Feature f);
// The setting that makes `f` hold, with its value in `s`: `parallel.pp = 4`, `model.moe_experts = 8`.
std::string feature_setting(Feature f, const FeatureSettings& s);

// A rule of the table: every pair of one feature of `first` and one of `second` is refused.
struct Refusal {
  std::vector<Feature> first;
  std::vector<Feature> second;
  std::string_view reason;   // why the two do not run together
  std::string_view nearest;  // the nearest combination that works ("use ...")
};
std::span<const Refusal> refusals();

// The rules that refuse the features of `s` (empty: the combination runs).
std::vector<const Refusal*> refusals_of(const FeatureSettings& s);
// "parallel.ep = 2 with parallel.zero_stage = 3: <reason>; <nearest>" for the first rule that
// refuses `s`, nullopt when none does. The run config adds "config: " in front.
std::optional<std::string> compatibility_refusal(const FeatureSettings& s);

// A pair of features that runs, and the tests (ctest names) that train with both against a
// reference.
struct TestedPair {
  Feature a;
  Feature b;
  std::vector<std::string_view> tests;
};
std::span<const TestedPair> tested_pairs();

// One cell of the matrix, the pair's settings evaluated against the rules.
struct Cell {
  bool same_key = false;                  // one setting cannot take both values
  std::vector<const Refusal*> refused_by;  // empty: runs
  const TestedPair* tested = nullptr;      // the parity tests of a pair that runs, if any
};
FeatureSettings pair_settings(Feature a, Feature b);
Cell cell(Feature a, Feature b);

struct ArrayConfiguration;  // config/covering_array.h

// docs/compatibility.md: the matrix, the refusals with their reasons and nearest working
// combinations, the tested pairs and the covering array that trains the rest (`array`, whose
// configurations mark their pairs trained; compatibility_doc.cpp).
std::string compatibility_markdown(std::span<const ArrayConfiguration> array);

}  // namespace tessera::config
