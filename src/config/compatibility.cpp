#include "config/compatibility.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace tessera::config {

namespace {

using F = Feature;

struct FeatureInfo {
  Feature feature;
  std::string_view name;
  std::string_view key;
};

constexpr std::array<FeatureInfo, kFeatureCount> kFeatures{{
    {F::Zero1, "parallel.zero_stage = 1", "parallel.zero_stage"},
    {F::Zero2, "parallel.zero_stage = 2", "parallel.zero_stage"},
    {F::Zero3, "parallel.zero_stage = 3", "parallel.zero_stage"},
    {F::TensorParallel, "parallel.tp > 1", "parallel.tp"},
    {F::SequenceParallel, "parallel.sp = true", "parallel.sp"},
    {F::ExpertParallel, "parallel.ep > 1", "parallel.ep"},
    {F::Pipeline, "parallel.pp > 1", "parallel.pp"},
    {F::GPipe, "parallel.schedule = \"gpipe\"", "parallel.schedule"},
    {F::OneFOneB, "parallel.schedule = \"1f1b\"", "parallel.schedule"},
    {F::Interleaved, "parallel.schedule = \"interleaved\"", "parallel.schedule"},
    {F::TwoBW, "parallel.schedule = \"2bw\"", "parallel.schedule"},
    {F::ZeroBubble, "parallel.schedule = \"zb-h1\"", "parallel.schedule"},
    {F::TopK, "parallel.compression = \"topk\"", "parallel.compression"},
    {F::Qsgd, "parallel.compression = \"qsgd\"", "parallel.compression"},
    {F::OneBit, "parallel.compression = \"onebit\"", "parallel.compression"},
    {F::PowerSgd, "parallel.compression = \"powersgd\"", "parallel.compression"},
    {F::RecomputeFull, "memory.recompute = \"full\"", "memory.recompute"},
    {F::RecomputeEveryK, "memory.recompute = \"every_k\"", "memory.recompute"},
    {F::RecomputeSelective, "memory.recompute = \"selective\"", "memory.recompute"},
    {F::RecomputeOptimal, "memory.recompute = \"optimal\"", "memory.recompute"},
    {F::RecomputeDtr, "memory.recompute = \"dtr\"", "memory.recompute"},
    {F::RecomputeCheckmate, "memory.recompute = \"checkmate\"", "memory.recompute"},
    {F::Bf16, "precision.compute = \"bf16\"", "precision.compute"},
    {F::Fp16, "precision.compute = \"fp16\"", "precision.compute"},
    {F::GradBf16, "parallel.grad_dtype = \"bf16\"", "parallel.grad_dtype"},
    {F::GradFp16, "parallel.grad_dtype = \"fp16\"", "parallel.grad_dtype"},
    {F::AdamW, "optim.name = \"adamw\"", "optim.name"},
    {F::Sgd, "optim.name = \"sgd\"", "optim.name"},
    {F::Adafactor, "optim.name = \"adafactor\"", "optim.name"},
    {F::Adam8bit, "optim.name = \"adam8bit\"", "optim.name"},
    {F::Lamb, "optim.name = \"lamb\"", "optim.name"},
    {F::Lars, "optim.name = \"lars\"", "optim.name"},
    {F::OneBitAdam, "optim.name = \"onebit_adam\"", "optim.name"},
    {F::OffloadActivations, "memory.offload_activations = \"nvme\"", "memory.offload_activations"},
    {F::OffloadActivationsAuto, "memory.offload_activations = \"auto\"", "memory.offload_activations"},
    {F::OffloadOptimizer, "memory.offload_optimizer = \"nvme\"", "memory.offload_optimizer"},
    {F::OffloadParams, "memory.offload_params = \"nvme\"", "memory.offload_params"},
    {F::DelayedUpdate, "optim.delayed_update_after > 0", "optim.delayed_update_after"},
    {F::EncodingLossless, "memory.activation_encoding = \"lossless\"", "memory.activation_encoding"},
    {F::EncodingGist, "memory.activation_encoding = \"gist\"", "memory.activation_encoding"},
    {F::EncodingFp8, "memory.activation_encoding = \"fp8\"", "memory.activation_encoding"},
    {F::Moe, "model.moe_experts > 0", "model.moe_experts"},
}};

constexpr std::array<Feature, kFeatureCount> kOrder = [] {
  std::array<Feature, kFeatureCount> order{};
  for (size_t i = 0; i < kFeatureCount; ++i) order[i] = kFeatures[i].feature;
  return order;
}();

const FeatureInfo& info(Feature f) {
  const auto i = static_cast<size_t>(f);
  TS_CHECK(i < kFeatureCount && kFeatures[i].feature == f, "unknown feature {}", i);
  return kFeatures[i];
}

// The string value of a key held as text, or nullptr for the numeric ones and those held as enums
// (`Settings`: const or not).
template <class Settings>
auto string_value(std::string_view key, Settings& s) -> decltype(&s.grad_dtype) {
  if (key == "parallel.grad_dtype") return &s.grad_dtype;
  if (key == "precision.compute") return &s.compute;
  if (key == "memory.offload_activations") return &s.offload_activations;
  if (key == "memory.offload_optimizer") return &s.offload_optimizer;
  if (key == "memory.offload_params") return &s.offload_params;
  if (key == "memory.activation_encoding") return &s.activation_encoding;
  return nullptr;
}

// The value an enumerated feature's name sets: `parallel.schedule = "2bw"` -> 2bw.
std::string_view named_value(std::string_view name) {
  const size_t open = name.find('"');
  return name.substr(open + 1, name.size() - open - 2);
}

// The kind a feature of `key` chooses, read by the kind's own name table (`parse`); nullopt for the
// features of other keys.
template <class Kind>
std::optional<Kind> kind_of(const FeatureInfo& f, std::string_view key, Kind (*parse)(std::string_view)) {
  if (f.key != key) return std::nullopt;
  return parse(named_value(f.name));
}

// The keys the settings hold as enums: calls visit(field, kind) with the field of f's key and the
// kind f chooses, and says whether f is of one of them.
template <class Settings, class Visit>
bool visit_kind(const FeatureInfo& f, Settings& s, Visit visit) {
  const auto try_key = [&](auto& field, std::string_view key, auto parse) {
    const auto kind = kind_of(f, key, parse);
    if (kind) visit(field, *kind);
    return kind.has_value();
  };
  return try_key(s.optimizer, "optim.name", parse_optimizer_kind) ||
         try_key(s.schedule, "parallel.schedule", parse_schedule_kind) ||
         try_key(s.compression, "parallel.compression", parse_compression) ||
         try_key(s.recompute, "memory.recompute", parse_recompute_policy);
}

// What with_feature sets: tp, ep and pp of a minimal combination, and experts for ep to split.
constexpr int kSplit = 2;
constexpr int64_t kExperts = 2;

// The combinations the engine does not run. The matrix, the run config's refusals and the
// engine's come from this list alone; each message keeps the words users (and tests) know.
const std::vector<Refusal> kRefusals = {
    {{F::TwoBW},
     {F::Zero3},
     "ZeRO-3 gathers the working copies of the parameters and 2BW keeps a second version of them; the two are not "
     "composed yet; none of DeepSpeed, Megatron-LM and torchtitan runs PipeDream-2BW, and DeepSpeed's pipeline engine "
     "takes ZeRO stage 1 only",
     "use parallel.zero_stage 0, 1 or 2 with 2bw, or ZeRO-3 with another schedule"},
    {{F::ExpertParallel},
     {F::OffloadParams},
     "the nvme tier holds a rank's ZeRO-3 parameter shard as one contiguous range of the model, and expert "
     "parallelism parts it into the dense parameters' shard over dp and the experts' over edp; DeepSpeed's MoE "
     "does not offload expert parameters to nvme either, and Megatron-LM and torchtitan offload no parameters to "
     "nvme (torchtitan's FSDP2 offloads its shards to CPU memory only)",
     "use memory.offload_params = \"none\" with parallel.ep > 1 (ZeRO-3 shards the experts over edp in memory), or "
     "parallel.ep = 1 with offloaded parameters"},
    {{F::TopK, F::Qsgd, F::OneBit, F::PowerSgd},
     {F::TwoBW},
     "a 2BW program holds several steps, and the compressor's state and random rounding advance per step, which the "
     "two do not agree on yet; none of DeepSpeed, Megatron-LM and torchtitan runs PipeDream-2BW",
     "use parallel.compression = \"none\" with 2bw, or another schedule"},
    {{F::GradBf16, F::GradFp16},
     {F::TopK, F::Qsgd, F::OneBit, F::PowerSgd},
     "a compressor chooses its own messages; Megatron-LM and torchtitan compress no gradients, and DeepSpeed's 1-bit "
     "optimizers choose their messages too",
     "use one of the two: parallel.grad_dtype = \"fp32\" with the compressor, or parallel.compression = \"none\" "
     "with 16-bit messages"},
    {{F::OneBitAdam},
     {F::Zero1, F::Zero2, F::Zero3},
     "1-bit Adam keeps the whole momentum on every data-parallel rank, the part it exchanges in one bit per element; "
     "ZeRO would shard it; DeepSpeed, whose optimizer it is, refuses the pair too (\"1bit-Adam is not compatible "
     "with ZeRO\"), and Megatron-LM and torchtitan have no 1-bit Adam",
     "use parallel.zero_stage = 0, or another optimizer with ZeRO"},
    {{F::OneBitAdam},
     {F::TopK, F::Qsgd, F::OneBit, F::PowerSgd},
     "1-bit Adam compresses its momentum itself and stops reducing gradients after optim.freeze_step; DeepSpeed's "
     "1-bit Adam is its own compressor as well, and Megatron-LM and torchtitan have neither",
     "use parallel.compression = \"none\" (or \"onebit\" with another optimizer)"},
    {{F::OneBitAdam},
     {F::TwoBW},
     "a 2BW program holds several optimizer steps, and whether a step reduces its gradients depends on the step; "
     "none of DeepSpeed, Megatron-LM and torchtitan runs PipeDream-2BW",
     "use another schedule with 1-bit Adam (\"1f1b\", \"gpipe\", \"interleaved\" or \"zb-h1\"), or another "
     "optimizer with 2bw"},
    {{F::OffloadActivationsAuto},
     {F::Pipeline, F::Interleaved},
     "planning offloading together with recomputation walks one stage's program of one chunk, and a pipeline "
     "stage's depends on the schedule's other stages, as an interleaved schedule's chunks (at any parallel.pp) "
     "depend on each other; none of DeepSpeed, Megatron-LM and torchtitan plans offloading and recomputation "
     "together",
     "use memory.offload_activations = \"nvme\" (every unit offloaded) under pipelines and the interleaved "
     "schedule, or another schedule with \"auto\""},
    {{F::OffloadActivationsAuto},
     {F::RecomputeFull, F::RecomputeEveryK, F::RecomputeSelective, F::RecomputeDtr, F::RecomputeCheckmate},
     "memory.offload_activations = \"auto\" chooses, with the optimal policy's dynamic program, what to recompute "
     "and what to offload under memory.activation_budget_mb (DTR decides at run time and plans nothing ahead; "
     "Checkmate's program has no offload decision); none of DeepSpeed, Megatron-LM and torchtitan plans offloading and "
     "recomputation together",
     "use memory.recompute = \"optimal\" with a budget, or memory.offload_activations = \"nvme\" beside this "
     "policy"},
    {{F::OffloadOptimizer},
     {F::OneBitAdam},
     "1-bit Adam exchanges its momentum inside its step, which the chunked stream of an offloaded state does not run; "
     "DeepSpeed does not compose them either: its optimizer offload is part of ZeRO, which its 1-bit Adam refuses; "
     "Megatron-LM and torchtitan have no 1-bit Adam",
     "use optim.name = \"adamw\" with memory.offload_optimizer, or keep 1-bit Adam's state in memory"},
    {{F::OffloadParams},
     {F::Zero1, F::Zero2},
     "memory.offload_params moves ZeRO-3's parameter shards, and stages 1 and 2 keep every parameter whole on each "
     "rank; DeepSpeed's parameter offload likewise needs ZeRO stage 3, and Megatron-LM and torchtitan offload no "
     "parameters to nvme (torchtitan's FSDP2 offloads its shards to CPU memory only)",
     "use parallel.zero_stage = 3 with memory.offload_params (at dp 1 the shard is the whole model)"},
    {{F::OffloadParams},
     {F::Adafactor, F::Adam8bit, F::Lamb, F::Lars},
     "offloaded parameters stream through an offloaded optimizer state in chunks, under ZeRO-3's sharding, where "
     "this optimizer's per-tensor statistics are summed over ranks in collectives a chunked step would split "
     "differently on each rank; DeepSpeed's offloaded step is built around its own CPU optimizers (Adam, Adagrad, "
     "Lion), and Megatron-LM and torchtitan offload no parameters to nvme",
     "use optim.name = \"adamw\" or \"sgd\" with memory.offload_params"},
    {{F::OffloadParams},
     {F::Pipeline},
     "the nvme tier holds a rank's parameter shard as one contiguous range of the model, and a pipeline stage's "
     "shard is several (a run of its parameters, and a tied embedding's piece of its own); DeepSpeed's pipeline "
     "engine takes ZeRO stage 1 only, so its parameter offload does not meet pipelines either; torchtitan "
     "composes FSDP2 with pipelines but offloads its shards to CPU memory only, and Megatron-LM offloads no "
     "parameters to nvme",
     "use memory.offload_params = \"none\" with parallel.pp > 1 (ZeRO-3 shards each stage's parameters in "
     "memory), or parallel.pp = 1 with offloaded parameters"},
    {{F::OffloadParams},
     {F::DelayedUpdate},
     "the delayed update works on a copy of the master values in compute memory, which offloaded parameters keep in "
     "the nvme tier; none of DeepSpeed, Megatron-LM and torchtitan ships the delayed update with parameter offload",
     "use memory.offload_optimizer = \"nvme\" with optim.delayed_update_after, or offload the parameters without "
     "delaying the update"},
    {{F::DelayedUpdate},
     {F::OneBitAdam},
     "1-bit Adam exchanges its momentum inside its step, and a delayed update runs on its own thread beside the "
     "next step's collectives; none of DeepSpeed, Megatron-LM and torchtitan ships the delayed update with 1-bit Adam",
     "use optim.name = \"adamw\" with optim.delayed_update_after"},
    {{F::DelayedUpdate},
     {F::TwoBW},
     "2BW's microbatches already read the weights one step old by schedule; delaying the update too would make them "
     "two steps old, which neither its stash nor the delayed update keeps; none of DeepSpeed, Megatron-LM and "
     "torchtitan runs PipeDream-2BW",
     "use a flushing schedule (\"1f1b\", \"gpipe\", \"interleaved\" or \"zb-h1\") with the delayed update"},
};

// The `tessera train` tests (GoogleTest cases under launched jobs) that cite several pairs.
constexpr std::string_view kTensorParallelCli =
    "ParallelTraining.TensorParallelRunsMatchTheOneProcessRunAndResumeBitwise";
constexpr std::string_view kPipelinedCli = "ParallelTraining.PipelinedRunsMatchTheOneProcessRunAndResumeBitwise";
constexpr std::string_view kTwoBWCli = "ParallelTraining.TwoBWRunsFollowTheOneProcessRunAndResumeBitwise";
constexpr std::string_view kCompressedCli = "ParallelTraining.CompressedRunsResumeBitwise";
constexpr std::string_view kCompressedEpCli = "ParallelTraining.CompressedExpertParallelRunsResumeBitwise";
constexpr std::string_view kMixedPrecisionCli = "ParallelTraining.MixedPrecisionRunsTrackFp32AndResumeBitwise";
constexpr std::string_view kExpertParallelCli = "Resharding.ExpertParallelTrainsAndMovesLikeOneProcess";
constexpr std::string_view kOffloadedActivationsCli = "Offload.OffloadedActivationsGiveTheSameRunUnderEveryLayout";
constexpr std::string_view kOffloadedStateCli = "Offload.AnOffloadedOptimizerStateGivesTheSameRun";
constexpr std::string_view kDelayedUpdateCli = "DelayedUpdateRuns.ExactBeforeItsStartThenOneStepStaleAlikeUnderEveryLayout";
constexpr std::string_view kDelayedResumeCli = "DelayedUpdateRuns.AResumedRunFollowsTheUninterruptedOneBitwise";
constexpr std::string_view kJointPlanCli = "Offload.OffloadAndRecomputationPlannedTogetherRecomputeLess";
constexpr std::string_view kDtrCli = "ParallelTraining.DtrAndCheckmateUnderZero3AndPipelinesLogTheLossesOfNone";
constexpr std::string_view kCheckmateCli = kDtrCli;
constexpr std::string_view kZero3PipelinedCli = "ParallelTraining.Zero3UnderAPipelineResumesBitwiseAndUnderAnotherLayout";
constexpr std::string_view kOffloadedParamsCli = "OffloadParams.ParametersInTheNvmeTierGiveTheSameRun";
constexpr std::string_view kMoeBf16Cli = "ParallelTraining.MoeInBf16TracksFp32AndResumesBitwise";
constexpr std::string_view kFp16CompressionCli = "Fp16Compression.SkippedStepsLeaveTheCompressorsStateAsTheyFoundIt";
constexpr std::string_view kLosslessEncodingCli = "ActivationEncoding.LosslessEncodingGivesTheSameRunUnderEveryLayout";
constexpr std::string_view kEncodedOffloadCli = "ActivationEncoding.OffloadingMovesTheEncodedBytes";

// Runs cells whose pair a parity test trains against a reference (ctest names; `ctest -R` runs them).
const std::vector<TestedPair> kTested = {
    {F::EncodingLossless, F::Zero3, {kLosslessEncodingCli}},
    {F::EncodingLossless, F::Pipeline, {kLosslessEncodingCli}},
    {F::EncodingLossless, F::TensorParallel, {kLosslessEncodingCli}},
    {F::EncodingLossless, F::RecomputeSelective, {kLosslessEncodingCli}},
    {F::EncodingLossless, F::OffloadActivations, {kLosslessEncodingCli}},
    {F::EncodingFp8, F::OffloadActivations, {kEncodedOffloadCli}},
    {F::Zero1, F::TensorParallel, {"parallel_tensor_parallel_4"}},
    {F::Zero2, F::TensorParallel, {"parallel_tensor_parallel_4", kTensorParallelCli}},
    {F::Zero3, F::TensorParallel, {"parallel_tensor_parallel_4"}},
    {F::Zero1, F::SequenceParallel, {"parallel_tensor_parallel_4", kTensorParallelCli}},
    {F::Zero2, F::SequenceParallel, {"parallel_tensor_parallel_4"}},
    {F::Zero3, F::SequenceParallel, {"parallel_tensor_parallel_4"}},
    {F::Zero1, F::ExpertParallel, {"parallel_moe_2", kExpertParallelCli}},
    {F::Zero2, F::ExpertParallel, {"parallel_moe_4"}},
    {F::Zero3, F::ExpertParallel, {"parallel_moe_2", "parallel_moe_4", kExpertParallelCli}},
    {F::Zero1, F::Pipeline, {"parallel_pipeline_parity_4", kPipelinedCli}},
    {F::Zero2, F::Pipeline, {"parallel_pipeline_parity_4", kPipelinedCli}},
    {F::Zero1, F::Interleaved, {"parallel_pipeline_parity_4"}},
    {F::Zero2, F::Interleaved, {"parallel_pipeline_parity_4", kPipelinedCli}},
    {F::Zero1, F::OneFOneB, {"parallel_pipeline_parity_4"}},
    {F::Zero2, F::OneFOneB, {"parallel_pipeline_parity_4"}},
    {F::Zero3, F::Pipeline, {"parallel_zero3_pipeline_4", kZero3PipelinedCli}},
    {F::Zero3, F::GPipe, {"parallel_zero3_pipeline_4"}},
    {F::Zero3, F::OneFOneB, {"parallel_zero_parity_2", "parallel_zero3_pipeline_4", kZero3PipelinedCli}},
    {F::Zero3, F::Interleaved, {"parallel_zero3_pipeline_4"}},
    {F::Zero1, F::TwoBW, {"parallel_pipedream_2bw_2"}},
    {F::Zero2, F::TwoBW, {"parallel_pipedream_2bw_2"}},
    {F::Zero1, F::ZeroBubble, {"parallel_pipeline_parity_4", "parallel_recompute_parity_2"}},
    {F::Zero2, F::ZeroBubble, {"parallel_pipeline_parity_4", "parallel_recompute_parity_2"}},
    {F::Zero3, F::ZeroBubble, {"parallel_recompute_parity_2", "parallel_zero3_pipeline_4"}},
    {F::Zero1, F::TopK, {"parallel_compression_2", kCompressedCli}},
    {F::Zero2, F::TopK, {"parallel_compression_2"}},
    {F::Zero1, F::Qsgd, {"parallel_compression_2"}},
    {F::Zero2, F::Qsgd, {"parallel_compression_2"}},
    {F::Zero1, F::OneBit, {"parallel_compression_2"}},
    {F::Zero2, F::OneBit, {"parallel_compression_2"}},
    {F::Zero1, F::PowerSgd, {"parallel_compression_2"}},
    {F::Zero2, F::PowerSgd, {"parallel_compression_2"}},
    {F::Zero1, F::RecomputeFull, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeFull, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeFull, {"parallel_recompute_parity_2"}},
    {F::Zero1, F::RecomputeEveryK, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeEveryK, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeEveryK, {"parallel_recompute_parity_2"}},
    {F::Zero1, F::RecomputeSelective, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeSelective, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeSelective, {"parallel_recompute_parity_2"}},
    {F::Zero1, F::RecomputeOptimal, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeOptimal, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeOptimal, {"parallel_recompute_parity_2"}},
    {F::Zero1, F::RecomputeDtr, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeDtr, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeDtr, {"parallel_recompute_parity_2", kDtrCli}},
    {F::Pipeline, F::RecomputeDtr, {kDtrCli}},
    {F::OneFOneB, F::RecomputeDtr, {kDtrCli}},
    {F::Zero1, F::RecomputeCheckmate, {"parallel_recompute_parity_2"}},
    {F::Zero2, F::RecomputeCheckmate, {"parallel_recompute_parity_2"}},
    {F::Zero3, F::RecomputeCheckmate, {"parallel_recompute_parity_2", kCheckmateCli}},
    {F::Pipeline, F::RecomputeCheckmate, {kCheckmateCli}},
    {F::OneFOneB, F::RecomputeCheckmate, {kCheckmateCli}},
    {F::Zero1, F::Bf16, {"parallel_precision_2"}},
    {F::Zero2, F::Bf16, {"parallel_precision_2"}},
    {F::Zero3, F::Bf16, {"parallel_precision_2"}},
    {F::Zero2, F::Fp16, {"parallel_precision_2", kMixedPrecisionCli}},
    {F::Zero3, F::Fp16, {"parallel_precision_2"}},
    {F::Zero2, F::GradBf16, {"parallel_precision_2", kMixedPrecisionCli}},
    {F::Zero1, F::AdamW, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::AdamW, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::AdamW, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Sgd, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::Sgd, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::Sgd, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Adafactor, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::Adafactor, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::Adafactor, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Adam8bit, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::Adam8bit, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::Adam8bit, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Lamb, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::Lamb, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::Lamb, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Lars, {"parallel_optimizer_parity_2"}},
    {F::Zero2, F::Lars, {"parallel_optimizer_parity_2"}},
    {F::Zero3, F::Lars, {"parallel_optimizer_parity_2"}},
    {F::Zero1, F::Moe, {"parallel_moe_2"}},
    {F::Zero2, F::Moe, {"parallel_moe_4"}},
    {F::TensorParallel, F::SequenceParallel, {"parallel_tensor_parallel_2", kTensorParallelCli}},
    {F::TensorParallel, F::ExpertParallel, {"parallel_moe_4"}},
    {F::TensorParallel, F::Pipeline, {"parallel_tensor_parallel_4", "parallel_tensor_parallel_8", kTensorParallelCli}},
    {F::TensorParallel, F::Interleaved, {"parallel_tensor_parallel_8"}},
    {F::TensorParallel, F::RecomputeFull, {"parallel_tensor_parallel_2"}},
    {F::TensorParallel, F::RecomputeSelective, {"parallel_tensor_parallel_2"}},
    {F::TensorParallel, F::Bf16, {"parallel_precision_2"}},
    {F::TensorParallel, F::Moe, {"parallel_moe_4"}},
    {F::SequenceParallel, F::Pipeline, {"parallel_tensor_parallel_4", "parallel_tensor_parallel_8"}},
    {F::SequenceParallel, F::Interleaved, {"parallel_tensor_parallel_8"}},
    {F::SequenceParallel, F::RecomputeFull, {"parallel_tensor_parallel_2"}},
    {F::SequenceParallel, F::RecomputeSelective, {"parallel_tensor_parallel_2"}},
    {F::SequenceParallel, F::Bf16, {"parallel_precision_2"}},
    {F::ExpertParallel, F::Pipeline, {"parallel_moe_4"}},
    {F::ExpertParallel, F::RecomputeFull, {"parallel_moe_2"}},
    {F::ExpertParallel, F::RecomputeSelective, {"parallel_moe_4"}},
    {F::ExpertParallel, F::Moe, {"parallel_moe_2", kExpertParallelCli}},
    {F::ExpertParallel, F::Bf16, {"parallel_moe_precision_2", kMoeBf16Cli}},
    {F::ExpertParallel, F::Fp16, {"parallel_moe_precision_2"}},
    {F::ExpertParallel, F::ZeroBubble, {"parallel_moe_4"}},
    {F::ExpertParallel, F::TopK, {"parallel_moe_4"}},
    {F::ExpertParallel, F::Qsgd, {"parallel_moe_4"}},
    {F::ExpertParallel, F::OneBit, {"parallel_moe_4"}},
    {F::ExpertParallel, F::PowerSgd, {"parallel_moe_4", kCompressedEpCli}},
    {F::Moe, F::TopK, {"parallel_moe_4"}},
    {F::Moe, F::Qsgd, {"parallel_moe_4"}},
    {F::Moe, F::OneBit, {"parallel_moe_4"}},
    {F::Moe, F::PowerSgd, {"parallel_moe_4"}},
    {F::ExpertParallel, F::Adafactor, {"parallel_moe_2", "parallel_moe_4"}},
    {F::Moe, F::Adafactor, {"parallel_moe_2", "parallel_moe_4"}},
    {F::Moe, F::SequenceParallel, {"parallel_moe_2", "parallel_moe_4"}},
    {F::ExpertParallel, F::OneBitAdam, {"parallel_moe_4", kCompressedEpCli}},
    {F::Moe, F::OneBitAdam, {"parallel_moe_4", kCompressedEpCli}},
    {F::ExpertParallel, F::SequenceParallel, {"parallel_moe_4"}},
    {F::Pipeline, F::GPipe, {"parallel_pipeline_parity_2", kPipelinedCli}},
    {F::Pipeline, F::OneFOneB, {"parallel_pipeline_parity_2", kPipelinedCli}},
    {F::Pipeline, F::Interleaved, {"parallel_pipeline_parity_2", kPipelinedCli}},
    {F::Pipeline, F::TwoBW, {"parallel_pipedream_2bw_2", kTwoBWCli}},
    {F::Pipeline, F::ZeroBubble, {"parallel_pipeline_parity_2", kPipelinedCli}},
    {F::Pipeline, F::RecomputeFull, {"parallel_pipeline_parity_2", kPipelinedCli}},
    {F::Pipeline, F::RecomputeEveryK, {"parallel_pipeline_parity_2"}},
    {F::Pipeline, F::RecomputeSelective, {"parallel_pipeline_parity_2"}},
    {F::Pipeline, F::Bf16, {"parallel_precision_2"}},
    {F::Pipeline, F::Adafactor, {"parallel_optimizer_parity_2"}},
    {F::Pipeline, F::Adam8bit, {"parallel_optimizer_parity_2"}},
    {F::Pipeline, F::Lamb, {"parallel_optimizer_parity_2"}},
    {F::Pipeline, F::Lars, {"parallel_optimizer_parity_2"}},
    {F::Pipeline, F::Moe, {"parallel_moe_4"}},
    {F::OneFOneB, F::RecomputeFull, {"parallel_pipeline_parity_2"}},
    {F::OneFOneB, F::RecomputeEveryK, {"parallel_pipeline_parity_2"}},
    {F::OneFOneB, F::RecomputeSelective, {"parallel_pipeline_parity_2"}},
    {F::OneFOneB, F::Moe, {"parallel_moe_4"}},
    {F::TwoBW, F::Bf16, {"parallel_precision_2"}},
    {F::ZeroBubble, F::RecomputeFull, {"parallel_pipeline_parity_2", "parallel_recompute_parity_2"}},
    {F::ZeroBubble, F::RecomputeEveryK, {"parallel_pipeline_parity_2"}},
    {F::ZeroBubble, F::RecomputeSelective, {"parallel_pipeline_parity_2"}},
    {F::ZeroBubble, F::Moe, {"parallel_moe_2", "parallel_moe_4", "Moe.SplitBackwardGivesTheBitsOfTheWholeOne"}},
    {F::RecomputeFull, F::Bf16, {"parallel_precision_2"}},
    {F::RecomputeFull, F::Moe, {"parallel_moe_2"}},
    {F::RecomputeSelective, F::Moe, {"parallel_moe_4"}},
    {F::Bf16, F::GradBf16, {kMixedPrecisionCli}},
    {F::Bf16, F::Moe, {"parallel_moe_precision_2", kMoeBf16Cli}},
    {F::Fp16, F::Moe, {"parallel_moe_precision_2"}},
    {F::Fp16, F::GradBf16, {kMixedPrecisionCli}},
    {F::Adafactor, F::TensorParallel, {"parallel_tensor_parallel_2", "parallel_tensor_parallel_4"}},
    {F::Fp16, F::TopK, {kFp16CompressionCli}},
    {F::Fp16, F::OneBit, {kFp16CompressionCli}},
    {F::Fp16, F::PowerSgd, {kFp16CompressionCli}},
    {F::Fp16, F::OneBitAdam, {"parallel_one_bit_adam_2"}},
    {F::Zero3, F::OffloadActivations, {kOffloadedActivationsCli}},
    {F::TensorParallel, F::OffloadActivations, {kOffloadedActivationsCli}},
    {F::Pipeline, F::OffloadActivations, {kOffloadedActivationsCli}},
    {F::RecomputeEveryK, F::OffloadActivations, {kOffloadedActivationsCli}},
    {F::RecomputeOptimal, F::OffloadActivationsAuto, {kJointPlanCli}},
    {F::Zero3, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::TensorParallel, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Pipeline, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Sgd, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Lamb, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Adafactor, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Adam8bit, F::OffloadOptimizer, {kOffloadedStateCli}},
    {F::Zero1, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::Zero2, F::DelayedUpdate, {kDelayedResumeCli}},
    {F::Zero3, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::TensorParallel, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::Pipeline, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::Bf16, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::OffloadOptimizer, F::DelayedUpdate, {kDelayedUpdateCli}},
    {F::Zero3, F::OffloadParams, {kOffloadedParamsCli}},
    {F::OffloadOptimizer, F::OffloadParams, {kOffloadedParamsCli}},
    {F::TensorParallel, F::OffloadParams, {kOffloadedParamsCli}},
    {F::SequenceParallel, F::OffloadParams, {kOffloadedParamsCli}},
    {F::Bf16, F::OffloadParams, {kOffloadedParamsCli}},
    {F::OffloadActivations, F::OffloadParams, {kOffloadedParamsCli}},
};

bool holds_any(const std::vector<Feature>& features, const FeatureSettings& s) {
  return std::any_of(features.begin(), features.end(), [&](Feature f) { return feature_holds(f, s); });
}

Feature first_holding(const std::vector<Feature>& features, const FeatureSettings& s) {
  for (Feature f : features) {
    if (feature_holds(f, s)) return f;
  }
  TS_FAIL("no feature of the refusal holds");
}

}  // namespace

std::span<const Feature> all_features() { return kOrder; }
std::string_view feature_name(Feature f) { return info(f).name; }
std::string_view feature_key(Feature f) { return info(f).key; }

bool feature_holds(Feature f, const FeatureSettings& s) {
  switch (f) {
    case F::Zero1: return s.zero_stage == 1;
    case F::Zero2: return s.zero_stage == 2;
    case F::Zero3: return s.zero_stage == 3;
    case F::TensorParallel: return s.tp > 1;
    case F::SequenceParallel: return s.sp;
    case F::ExpertParallel: return s.ep > 1;
    case F::Pipeline: return s.pp > 1;
    case F::Moe: return s.moe_experts > 0;
    case F::DelayedUpdate: return s.delayed_update_after > 0;
    default: break;
  }
  bool holds = false;
  if (visit_kind(info(f), s, [&](const auto& field, auto kind) { holds = field == kind; })) return holds;
  const std::string* value = string_value(info(f).key, s);
  TS_CHECK(value != nullptr, "feature '{}' has no value to compare", info(f).name);
  return *value == named_value(info(f).name);
}

FeatureSettings with_feature(FeatureSettings s, Feature f) {
  switch (f) {
    case F::Zero1: s.zero_stage = 1; return s;
    case F::Zero2: s.zero_stage = 2; return s;
    case F::Zero3: s.zero_stage = 3; return s;
    case F::TensorParallel: s.tp = std::max(s.tp, kSplit); return s;
    case F::SequenceParallel:
      s.sp = true;
      s.tp = std::max(s.tp, kSplit);
      return s;
    case F::ExpertParallel:
      s.ep = kSplit;
      s.moe_experts = std::max(s.moe_experts, kExperts);
      return s;
    case F::Pipeline: s.pp = std::max(s.pp, kSplit); return s;
    case F::Moe: s.moe_experts = std::max(s.moe_experts, kExperts); return s;
    case F::DelayedUpdate: s.delayed_update_after = std::max<int64_t>(s.delayed_update_after, 1); return s;
    case F::OffloadParams:
      // It moves ZeRO-3's shards, whose values the offloaded optimizer streams.
      s.offload_params = "nvme";
      s.offload_optimizer = "nvme";
      if (s.zero_stage == 0) s.zero_stage = 3;
      return s;
    case F::OffloadActivationsAuto:
      // It plans with the optimal policy.
      s.offload_activations = "auto";
      if (s.recompute == RecomputePolicy::None) s.recompute = RecomputePolicy::Optimal;
      return s;
    default: break;
  }
  if (visit_kind(info(f), s, [](auto& field, auto kind) { field = kind; })) return s;
  std::string* value = string_value(info(f).key, s);
  TS_CHECK(value != nullptr, "feature '{}' has no value to set", info(f).name);
  *value = std::string(named_value(info(f).name));
  return s;
}

std::string feature_setting(Feature f, const FeatureSettings& s) {
  switch (f) {
    case F::TensorParallel: return fmt::format("parallel.tp = {}", s.tp);
    case F::ExpertParallel: return fmt::format("parallel.ep = {}", s.ep);
    case F::Pipeline: return fmt::format("parallel.pp = {}", s.pp);
    case F::Moe: return fmt::format("model.moe_experts = {}", s.moe_experts);
    case F::DelayedUpdate: return fmt::format("optim.delayed_update_after = {}", s.delayed_update_after);
    default: return std::string(info(f).name);
  }
}

std::span<const Refusal> refusals() { return kRefusals; }
std::span<const TestedPair> tested_pairs() { return kTested; }

std::vector<const Refusal*> refusals_of(const FeatureSettings& s) {
  std::vector<const Refusal*> out;
  for (const Refusal& r : kRefusals) {
    if (holds_any(r.first, s) && holds_any(r.second, s)) out.push_back(&r);
  }
  return out;
}

std::optional<std::string> compatibility_refusal(const FeatureSettings& s) {
  const std::vector<const Refusal*> found = refusals_of(s);
  if (found.empty()) return std::nullopt;
  const Refusal& r = *found.front();
  return fmt::format("{} with {}: {}; {}", feature_setting(first_holding(r.first, s), s),
                     feature_setting(first_holding(r.second, s), s), r.reason, r.nearest);
}

FeatureSettings pair_settings(Feature a, Feature b) { return with_feature(with_feature(FeatureSettings{}, a), b); }

Cell cell(Feature a, Feature b) {
  Cell c;
  c.same_key = a != b && feature_key(a) == feature_key(b);
  if (c.same_key) return c;
  c.refused_by = refusals_of(pair_settings(a, b));
  for (const TestedPair& t : kTested) {
    if ((t.a == a && t.b == b) || (t.a == b && t.b == a)) c.tested = &t;
  }
  return c;
}

}  // namespace tessera::config
