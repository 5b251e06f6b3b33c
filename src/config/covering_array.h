#pragma once
// A pairwise covering array of the compatibility matrix (config/compatibility.h): a small set of
// configurations in which every pair of features that runs is turned on together at least once,
// each configuration on the fewest processes that hold it (tp × pp × dp, at most 8). Built from the
// table itself: each feature is turned on by with_feature, the pairs a configuration covers are the
// features that hold on its settings, and a configuration must pass the table's refusals and
// `runs`, the run config's own checks (the rules of three the table leaves to it). Training each
// configuration against its one-process reference is what turns the matrix's "runs" into "trained"
// (tests/train/covering_array_run.cpp; scripts/matrix.sh runs them all).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/compatibility.h"

namespace tessera::config {

// How a configuration's run is held against its reference: an exact transform within the parity
// tests' 1e-5 on every loss and 1e-4 on the final parameters; a lossy one within the bound its own
// parity test states, on every step's loss.
// ShardedEightBit: 8-bit Adam under tensor or expert parallelism, whose quantization blocks (and
// its 4096-element threshold) follow each rank's shard of a matrix, as bitsandbytes' do under
// Megatron-LM, so its moments round differently from one process's: the losses within the exact
// bound, the parameters not compared.
// CompressedAdafactor: gradient compression under Adafactor, whose update divides every element by
// its factored second moment, so what a compressor holds back of a gradient (error feedback) moves
// the weights more than under Adam: the array measured 0.54 % after four compressed steps with
// top-k and with 1-bit (0.1 % under AdamW), held to 1 %, 1-bit Adam's bound, rather than the 0.5 %
// compression_test states for AdamW.
enum class ArrayTolerance : uint8_t {
  Exact, ShardedEightBit, Compressed, CompressedAdafactor, OneBitAdam, MixedPrecision, LossyEncoding
};

struct ArrayConfiguration {
  int id = 0;                      // 1-based, in the order the generator made them
  FeatureSettings settings;
  int dp = 1;                      // 2 where a feature needs data-parallel ranks
  int world = 1;                   // tp × pp × dp
  bool ci = false;                 // in the subset scripts/test.sh runs
  std::vector<Feature> features;   // every feature that holds on `settings`, in matrix order
  std::vector<std::pair<Feature, Feature>> first_covered;  // the pairs no earlier configuration covers
};

// A configuration's settings as dotted overrides of a tiny run (`parallel.tp` = "2", ...): the
// features' keys, parallel.dp, and what a feature needs to act within a few steps of that run
// (compression and 1-bit Adam after two exact steps, as their parity tests run them, 2BW's uniform delay, a budget for the planned policies).
std::vector<std::pair<std::string, std::string>> array_overrides(const FeatureSettings& s);
int array_data_parallel(const FeatureSettings& s);
int array_world(const FeatureSettings& s);

// The one-process run a configuration is held against: the same model and optimizer and, for the
// transforms whose arithmetic differs from the default by design (2BW's one-step-old weights, the
// delayed update), the same transform; every layout, memory and precision setting removed. 1-bit
// Adam is held against AdamW, as its parity test holds it.
FeatureSettings array_reference(const FeatureSettings& s);
// The loosest tolerance any of the configuration's features needs.
ArrayTolerance array_tolerance(const FeatureSettings& s);
// Relative bound on every step's loss; the parameters are compared only under Exact.
double array_loss_bound(ArrayTolerance t);

// Whether a run of `s` held to its tolerance proves the pair: both hold, and the pair is lossy by
// itself or the run is held exactly (two transforms exact together are proven only by a
// configuration held exactly, where nothing lossy hides their error).
bool array_proves(const FeatureSettings& s, Feature a, Feature b);

// The array: greedy. Each configuration starts from the first pair no earlier one proves and takes
// on, one at a time, the feature that proves the most new pairs per process of the world it grows
// to, without dropping a feature it has (the defaults, AdamW and 1F1B, may give way) and while `runs`
// accepts it. Deterministic. The CI subset is marked: configurations taken where they prove the most
// pairs with the default optimizer or schedule still open, until every such pair is proven.
std::vector<ArrayConfiguration> covering_array(const std::function<bool(const FeatureSettings&)>& runs);

// The configuration of `array` that first covers the pair, or nullptr.
const ArrayConfiguration* covering_configuration(std::span<const ArrayConfiguration> array, Feature a, Feature b);

}  // namespace tessera::config
