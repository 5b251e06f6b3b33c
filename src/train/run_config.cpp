#include "train/run_config.h"

#include "config/compatibility.h"
#include "config/expert_parallel_shape.h"
#include "config/tensor_parallel_shape.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "optim/optimizer_config.h"

namespace tessera::train {

using config::TableReader;
using config::check_range;

namespace {

std::string quoted_list(std::span<const std::string_view> names, std::string_view last_join) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == names.size() ? last_join : ", ", names[i]);
  }
  return out;
}

// parallel.schedule, parallel.compression and memory.recompute as the config reads them: a known
// name, or a refusal that lists them.
config::ScheduleKind schedule_kind_of(std::string_view name) {
  const std::optional<config::ScheduleKind> kind = config::find_schedule_kind(name);
  TS_CHECK(kind.has_value(), "config: parallel.schedule = '{}' is not known; use \"1f1b\", \"gpipe\", "
           "\"interleaved\", \"zb-h1\" or \"2bw\"", name);
  return *kind;
}

memory::RecomputePolicy recompute_policy_of(std::string_view name) {
  const std::optional<memory::RecomputePolicy> policy = memory::find_recompute_policy(name);
  TS_CHECK(policy.has_value(), "config: memory.recompute = '{}' is not known; use \"none\", \"full\", \"every_k\", "
           "\"selective\", \"optimal\", \"dtr\" or \"checkmate\"", name);
  return *policy;
}

// optim.name as the config reads it: a known name, or a refusal that lists them.
optim::OptimizerKind optimizer_kind_of(std::string_view name) {
  const std::optional<optim::OptimizerKind> kind = config::find_optimizer_kind(name);
  TS_CHECK(kind.has_value(), "config: optim.name = '{}' is not known; use {}", name,
           quoted_list(optim::optimizer_names(), " or "));
  return *kind;
}

// The optimizer's own keys: ranges, and no key that the chosen optimizer would ignore (set away
// from its default), as the recompute keys are refused for the policies that ignore them.
void validate_optimizer(const OptimSection& o) {
  using K = optim::OptimizerKind;
  const optim::OptimizerConfig defaults;
  struct Key {
    const char* name;
    bool is_default;
    std::vector<K> readers;
  };
  const bool adafactor_beta1 = o.kind == K::Adafactor && o.first_moment;
  const std::vector<Key> keys = {
      {"beta1", o.beta1 == defaults.beta1,
       adafactor_beta1 ? std::vector<K>{K::AdamW, K::Adam8bit, K::Lamb, K::OneBitAdam, K::Adafactor}
                       : std::vector<K>{K::AdamW, K::Adam8bit, K::Lamb, K::OneBitAdam}},
      {"beta2", o.beta2 == defaults.beta2, {K::AdamW, K::Adam8bit, K::Lamb, K::OneBitAdam}},
      {"eps", o.eps == defaults.eps, {K::AdamW, K::Adam8bit, K::Lamb, K::Lars, K::OneBitAdam}},
      {"momentum", o.momentum == defaults.momentum, {K::Sgd, K::Lars}},
      {"nesterov", o.nesterov == defaults.nesterov, {K::Sgd}},
      {"decoupled_weight_decay", o.decoupled_weight_decay == defaults.decoupled_weight_decay, {K::Sgd}},
      {"trust_coefficient", o.trust_coefficient == defaults.trust_coefficient, {K::Lars}},
      {"unadapted_lr_scale", o.unadapted_lr_scale == defaults.unadapted_lr_scale, {K::Lamb, K::Lars}},
      {"first_moment", o.first_moment == defaults.first_moment, {K::Adafactor}},
      {"relative_step", o.relative_step == defaults.relative_step, {K::Adafactor}},
      {"decay_rate", o.decay_rate == defaults.decay_rate, {K::Adafactor}},
      {"clip_threshold", o.clip_threshold == defaults.clip_threshold, {K::Adafactor}},
      {"block_size", o.block_size == defaults.block_size, {K::Adam8bit}},
      {"quantization", o.quantization == defaults.quantization, {K::Adam8bit}},
      {"freeze_step", o.freeze_step == defaults.freeze_step, {K::OneBitAdam}},
      {"variance_freeze_step", o.variance_freeze_step == defaults.variance_freeze_step, {K::AdamW}},
  };
  for (const Key& k : keys) {
    if (k.is_default || std::find(k.readers.begin(), k.readers.end(), o.kind) != k.readers.end()) continue;
    TS_CHECK(!(o.kind == K::Adafactor && std::string_view(k.name) == "beta1"),
             "config: optim.beta1 is read by optim.name = \"adafactor\" only with optim.first_moment = true (the "
             "paper's Adafactor keeps no first moment); set optim.first_moment = true or remove optim.beta1");
    std::vector<std::string_view> readers;
    for (K reader : k.readers) readers.push_back(optim::optimizer_name(reader));
    TS_FAIL("config: optim.{} is read by optim.name = {} only (it is \"{}\"); remove it or choose one of those",
            k.name, quoted_list(readers, " or "), optim::optimizer_name(o.kind));
  }
  TS_CHECK(o.momentum >= 0.0f && o.momentum < 1.0f, "config: optim.momentum = {} must be in [0, 1)", o.momentum);
  TS_CHECK(!o.nesterov || o.momentum > 0.0f,
           "config: optim.nesterov = true needs momentum: set optim.momentum (for example 0.9)");
  TS_CHECK(o.trust_coefficient > 0.0f && o.trust_coefficient <= 1.0f,
           "config: optim.trust_coefficient = {} must be in (0, 1] (LARS uses 0.001)", o.trust_coefficient);
  TS_CHECK(o.unadapted_lr_scale >= 0.0f && o.unadapted_lr_scale <= 1000.0f,
           "config: optim.unadapted_lr_scale = {} must be in [0, 1000] (0 freezes the norm gains and biases; 1 gives "
           "them optim.lr)",
           o.unadapted_lr_scale);
  TS_CHECK(o.decay_rate > 0.0f && o.decay_rate <= 1.0f,
           "config: optim.decay_rate = {} must be in (0, 1] (Adafactor's beta2 at step t is 1 - t^-decay_rate; the "
           "paper uses 0.8)", o.decay_rate);
  TS_CHECK(o.clip_threshold > 0.0f, "config: optim.clip_threshold must be positive (the paper uses 1), got {}",
           o.clip_threshold);
  check_range<int64_t>("optim.block_size", o.block_size, 16, int64_t{1} << 24);
  TS_CHECK(o.quantization == "dynamic" || o.quantization == "linear",
           "config: optim.quantization = '{}' is not known; use \"dynamic\" or \"linear\"", o.quantization);
  check_range<int64_t>("optim.freeze_step", o.freeze_step, 0, int64_t{1} << 40);
  check_range<int64_t>("optim.variance_freeze_step", o.variance_freeze_step, 0, int64_t{1} << 40);
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  check_range<int64_t>("train.steps", train.steps, 1, int64_t{1} << 40);
  check_range<int64_t>("train.exit_after", train.exit_after, 0, int64_t{1} << 40);
  TS_CHECK(std::isfinite(train.max_minutes) && train.max_minutes >= 0.0f,
           "config: train.max_minutes = {} must be 0 (no limit) or a number of minutes", train.max_minutes);
  check_range("train.batch_size", train.batch_size, 1, 1 << 24);
  check_range("train.micro_batch_size", train.micro_batch_size, 1, 1 << 24);
  check_range("parallel.dp", parallel.dp, 1, 1 << 20);
  check_range("parallel.pp", parallel.pp, 1, 1 << 10);
  check_range("parallel.tp", parallel.tp, 1, 1 << 10);
  if (const auto refusal = config::tensor_parallel_refusal(model, parallel.tp)) TS_FAIL("config: {}", *refusal);
  if (parallel.sp && parallel.tp == 1) {
    std::vector<int> sizes = config::tensor_parallel_sizes(model, 16);
    std::erase(sizes, 1);
    TS_FAIL("config: parallel.sp = true shards the sequence over the tensor-parallel ranks, but parallel.tp = 1; set "
            "parallel.tp to 2 or more (values that work: {}) or parallel.sp = false",
            sizes.empty() ? std::string("none for this model") : fmt::format("{}", fmt::join(sizes, ", ")));
  }
  TS_CHECK(!parallel.sp || model.seq_len % parallel.tp == 0,
           "config: parallel.sp = true splits every sequence into parallel.tp = {} equal parts, but model.seq_len = {} "
           "does not divide by {}; set model.seq_len to a multiple of {} (for example {}) or parallel.sp = false",
           parallel.tp, model.seq_len, parallel.tp, parallel.tp, (model.seq_len / parallel.tp + 1) * parallel.tp);
  check_range("parallel.zero_stage", parallel.zero_stage, 0, 3);
  check_range("parallel.ep", parallel.ep, 1, 1 << 10);
  if (const auto refusal = config::expert_parallel_refusal(model, parallel.ep)) TS_FAIL("config: {}", *refusal);
  TS_CHECK(parallel.dp % parallel.ep == 0,
           "config: parallel.ep = {} is carved out of the data-parallel ranks and must divide parallel.dp = {}; use an "
           "ep that divides dp", parallel.ep, parallel.dp);
  TS_CHECK(parallel.bucket_mb * 1048576.0 >= 4.0 && parallel.bucket_mb <= 1048576.0f,
           "config: parallel.bucket_mb = {} must hold at least one f32 element (4 bytes) and be at most 1048576",
           parallel.bucket_mb);
  TS_CHECK(parallel.timeout_seconds > 0.0f, "config: parallel.timeout_seconds must be positive, got {}",
           parallel.timeout_seconds);
  // In 64 bits: each factor is in range, their product need not fit an int.
  const int64_t per_round = int64_t{train.micro_batch_size} * parallel.dp;
  if (train.batch_size % per_round != 0) {
    // A smaller microbatch keeps the global batch (and so the run's numbers); a larger batch changes them.
    const int64_t larger_batch = (train.batch_size / per_round + 1) * per_round;
    std::string fix = fmt::format("set train.batch_size = {} (a larger global batch)", larger_batch);
    if (train.batch_size % parallel.dp == 0) {
      const int64_t per_rank = train.batch_size / parallel.dp;
      int64_t micro = std::min<int64_t>(train.micro_batch_size, per_rank);
      while (per_rank % micro != 0) --micro;
      fix = fmt::format("set train.micro_batch_size = {}, which keeps the global batch of {} ({} × dp {} × {} "
                        "microbatches), or {}", micro, train.batch_size, micro, parallel.dp, per_rank / micro, fix);
    }
    TS_FAIL("config: train.batch_size ({}) must be a multiple of train.micro_batch_size × parallel.dp ({} × {} = {}); "
            "{}", train.batch_size, train.micro_batch_size, parallel.dp, per_round, fix);
  }
  check_range("train.eval_every", train.eval_every, 0, 1 << 30);
  check_range("train.eval_batches", train.eval_batches, 1, 1 << 20);
  check_range("train.sample_every", train.sample_every, 0, 1 << 30);
  check_range("train.sample_tokens", train.sample_tokens, 0, 1 << 20);
  TS_CHECK(std::isfinite(train.sample_temperature) && train.sample_temperature >= 0.0f,
           "config: train.sample_temperature = {} must be a finite number >= 0 (0: the likeliest token every time)",
           train.sample_temperature);
  check_range("train.sample_top_k", train.sample_top_k, 0, 1 << 24);
  validate_optimizer(optim);
  TS_CHECK(optim.lr > 0.0f && optim.lr < 10.0f, "config: optim.lr = {} must be in (0, 10)", optim.lr);
  TS_CHECK(optim.min_lr >= 0.0f && optim.min_lr <= optim.lr, "config: optim.min_lr = {} must be in [0, optim.lr = {}]",
           optim.min_lr, optim.lr);
  check_range<int64_t>("optim.warmup_steps", optim.warmup_steps, 0, int64_t{1} << 40);
  TS_CHECK(optim.beta1 >= 0.0f && optim.beta1 < 1.0f, "config: optim.beta1 = {} must be in [0, 1)", optim.beta1);
  TS_CHECK(optim.beta2 >= 0.0f && optim.beta2 < 1.0f, "config: optim.beta2 = {} must be in [0, 1)", optim.beta2);
  TS_CHECK(optim.eps > 0.0f, "config: optim.eps must be positive, got {}", optim.eps);
  TS_CHECK(optim.weight_decay >= 0.0f, "config: optim.weight_decay must be >= 0, got {}", optim.weight_decay);
  TS_CHECK(optim.grad_clip >= 0.0f, "config: optim.grad_clip must be >= 0 (0 disables clipping), got {}",
           optim.grad_clip);
  TS_CHECK(parallel.weight_version == "newest" || parallel.weight_version == "delayed",
           "config: parallel.weight_version = '{}' is not known; use \"newest\" (a microbatch reads the newest "
           "weights its stage holds) or \"delayed\" (all of batch b reads version b - 1)",
           parallel.weight_version);
  TS_CHECK(parallel.weight_version == "newest" || parallel.schedule == config::ScheduleKind::PipeDream2BW,
           "config: parallel.weight_version = \"{}\" chooses between PipeDream-2BW's two weight versions, but "
           "parallel.schedule = \"{}\" keeps one; set parallel.schedule = \"2bw\" or leave parallel.weight_version out",
           parallel.weight_version, config::schedule_name(parallel.schedule));
  check_range("parallel.virtual_stages", parallel.virtual_stages, 1, 1 << 10);
  TS_CHECK(parallel.virtual_stages == 1 || parallel.schedule == config::ScheduleKind::Interleaved,
           "config: parallel.virtual_stages = {} splits each rank's layers into chunks, which only the interleaved "
           "schedule runs; set parallel.schedule = \"interleaved\" or parallel.virtual_stages = 1",
           parallel.virtual_stages);
  TS_CHECK(parallel.virtual_stages <= model.n_layer,
           "config: parallel.virtual_stages = {} exceeds model.n_layer = {}: every chunk needs a block",
           parallel.virtual_stages, model.n_layer);
  {
    // In 64 bits: both factors are in range, their product need not be.
    const int64_t stages = int64_t{parallel.pp} * parallel.virtual_stages;
    TS_CHECK(stages <= model.n_layer,
             "config: parallel.pp × parallel.virtual_stages = {} × {} = {} stages, but model.n_layer = {}: every stage "
             "needs at least one block; use fewer stages or more layers",
             parallel.pp, parallel.virtual_stages, stages, model.n_layer);
    if (!parallel.stage_layers.empty()) {
      int64_t sum = 0;
      for (int64_t blocks : parallel.stage_layers) {
        TS_CHECK(blocks >= 1 && blocks <= model.n_layer,
                 "config: parallel.stage_layers holds {}: every stage needs between 1 and model.n_layer = {} blocks",
                 blocks, model.n_layer);
        sum += blocks;
      }
      TS_CHECK(static_cast<int64_t>(parallel.stage_layers.size()) == stages && sum == model.n_layer,
               "config: parallel.stage_layers = {} gives {} stages of {} blocks in all, but the layout has pp × "
               "virtual_stages = {} stages and the model {} blocks; list one block count per stage, summing to "
               "model.n_layer (or leave it out for a split balanced by the cost model)",
               fmt::format("[{}]", fmt::join(parallel.stage_layers, ", ")), parallel.stage_layers.size(), sum, stages,
               model.n_layer);
    }
    const int64_t microbatches = train.batch_size / (int64_t{train.micro_batch_size} * parallel.dp);
    TS_CHECK(parallel.pp == 1 || parallel.schedule != config::ScheduleKind::Interleaved || microbatches % parallel.pp == 0,
             "config: the interleaved schedule with parallel.pp = {} needs the microbatches per step, train.batch_size "
             "/ (train.micro_batch_size × parallel.dp) = {}, to be a multiple of parallel.pp; for example set "
             "train.batch_size = {}",
             parallel.pp, microbatches,
             (microbatches / parallel.pp + 1) * parallel.pp * int64_t{train.micro_batch_size} * parallel.dp);
  }
  {
    const config::CompressionMethod method = parallel.compression;
    const auto refuse_unread = [&](bool given, std::string_view key, config::CompressionMethod reader) {
      TS_CHECK(!given || method == reader, "config: compression.{} is read by parallel.compression = \"{}\" only (it "
               "is \"{}\")", key, config::compression_name(reader), config::compression_name(method));
    };
    refuse_unread(compression.ratio != 0, "ratio", config::CompressionMethod::TopK);
    refuse_unread(compression.levels != 0, "levels", config::CompressionMethod::Qsgd);
    refuse_unread(compression.rank != 0, "rank", config::CompressionMethod::PowerSgd);
    TS_CHECK(std::isfinite(compression.ratio) && compression.ratio >= 0 && compression.ratio <= 1,
             "config: compression.ratio = {} must be a fraction of each bucket in (0, 1]", compression.ratio);
    check_range("compression.levels", compression.levels, 0, 127);
    check_range("compression.rank", compression.rank, 0, 1 << 16);
    check_range<int64_t>("compression.warmup_steps", compression.warmup_steps, 0, int64_t{1} << 40);
    TS_CHECK(method != config::CompressionMethod::None || compression.warmup_steps == 0,
             "config: compression.warmup_steps is read when parallel.compression is not \"none\"");
  }
  {
    const DType compute = config::parse_precision(precision.compute, "precision.compute");
    const DType grad_dtype = config::parse_precision(parallel.grad_dtype, "parallel.grad_dtype");
    const PrecisionSection defaults;
    const auto refuse_unread = [&](bool given, std::string_view key) {
      TS_CHECK(!given || compute == DType::F16, "config: precision.{} is read by precision.compute = \"fp16\" only (it "
               "is \"{}\"): bf16 has the range of fp32 and needs no loss scaling", key, precision.compute);
    };
    refuse_unread(precision.loss_scale != defaults.loss_scale, "loss_scale");
    refuse_unread(precision.init_scale != defaults.init_scale, "init_scale");
    refuse_unread(precision.growth_interval != defaults.growth_interval, "growth_interval");
    refuse_unread(precision.growth_factor != defaults.growth_factor, "growth_factor");
    refuse_unread(precision.backoff_factor != defaults.backoff_factor, "backoff_factor");
    if (precision.loss_scale != "dynamic") {
      double fixed = 0;
      try {
        size_t used = 0;
        fixed = std::stod(precision.loss_scale, &used);
        if (used != precision.loss_scale.size()) fixed = 0;
      } catch (const std::exception&) {
        fixed = 0;
      }
      TS_CHECK(std::isfinite(fixed) && fixed >= 1.0 && fixed <= 1e30, "config: precision.loss_scale = '{}' must be "
               "\"dynamic\" or a fixed scale of at least 1 (e.g. 1024)", precision.loss_scale);
    }
    TS_CHECK(std::isfinite(precision.init_scale) && precision.init_scale >= 1.0 && precision.init_scale <= 1e30,
             "config: precision.init_scale = {} must be at least 1 (e.g. 65536)", precision.init_scale);
    check_range<int64_t>("precision.growth_interval", precision.growth_interval, 1, int64_t{1} << 40);
    TS_CHECK(std::isfinite(precision.growth_factor) && precision.growth_factor >= 1.0 && precision.growth_factor <= 1e3,
             "config: precision.growth_factor = {} must be at least 1 (e.g. 2)", precision.growth_factor);
    TS_CHECK(std::isfinite(precision.backoff_factor) && precision.backoff_factor > 0.0 &&
                 precision.backoff_factor < 1.0,
             "config: precision.backoff_factor = {} must be in (0, 1) (e.g. 0.5)", precision.backoff_factor);
    TS_CHECK(grad_dtype == DType::F32 || parallel.dp > 1, "config: parallel.grad_dtype = \"{}\" sets the dtype of the "
             "data-parallel gradient reduction, and parallel.dp = 1 has none; leave it \"fp32\"", parallel.grad_dtype);
  }
  using memory::RecomputePolicy;
  const std::string_view recompute = memory::recompute_policy_name(memory.recompute);
  check_range("memory.recompute_every", memory.recompute_every, 0, 1 << 20);
  TS_CHECK(memory.recompute_every == 0 || memory.recompute == RecomputePolicy::EveryK,
           "config: memory.recompute_every = {} is read by memory.recompute = \"every_k\" only (it is \"{}\")",
           memory.recompute_every, recompute);
  TS_CHECK(std::isfinite(memory.activation_budget_mb) && memory.activation_budget_mb >= 0.0f &&
               memory.activation_budget_mb <= 1e9f,
           "config: memory.activation_budget_mb = {} must be a size in MiB (0 or more)", memory.activation_budget_mb);
  const bool budgeted = memory.recompute == RecomputePolicy::Optimal || memory.recompute == RecomputePolicy::Dtr ||
                        memory.recompute == RecomputePolicy::Checkmate;
  TS_CHECK(memory.recompute != RecomputePolicy::Optimal || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"optimal\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) the schedule may use; it then recomputes as little as that budget allows");
  TS_CHECK(memory.recompute != RecomputePolicy::Dtr || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"dtr\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) DTR evicts to stay within");
  TS_CHECK(memory.recompute != RecomputePolicy::Checkmate || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"checkmate\" needs memory.activation_budget_mb: the activation memory (MiB "
           "per microbatch) Checkmate's schedule may use");
  TS_CHECK(memory.activation_budget_mb == 0.0f || budgeted,
           "config: memory.activation_budget_mb is read by memory.recompute = \"optimal\", \"dtr\" or "
           "\"checkmate\" only (it is \"{}\")",
           recompute);
  TS_CHECK(std::isfinite(memory.solver_seconds) && memory.solver_seconds >= 0 && memory.solver_seconds <= 86400,
           "config: memory.solver_seconds = {} must be a time limit in seconds, 0 to 86400 (0: no branch and bound, "
           "the LP relaxation rounded)",
           memory.solver_seconds);
  TS_CHECK(memory.solver_seconds == MemorySection{}.solver_seconds || memory.recompute == RecomputePolicy::Checkmate,
           "config: memory.solver_seconds = {} is read by memory.recompute = \"checkmate\" only (it is \"{}\")",
           memory.solver_seconds, recompute);
  TS_CHECK(memory.offload_activations == "none" || memory.offload_activations == "nvme" ||
               memory.offload_activations == "auto",
           "config: memory.offload_activations = \"{}\" is not known; use \"none\", \"nvme\" or \"auto\"",
           memory.offload_activations);
  TS_CHECK(memory.offload_activations != "auto" || memory.recompute != RecomputePolicy::None,
           "config: memory.offload_activations = \"auto\" plans offloading together with memory.recompute = "
           "\"optimal\" under memory.activation_budget_mb; set those, or offload every unit with \"nvme\"");
  TS_CHECK(memory.activation_encoding == "none" || memory.activation_encoding == "lossless" ||
               memory.activation_encoding == "gist" || memory.activation_encoding == "fp8",
           "config: memory.activation_encoding = \"{}\" is not known; use \"none\", \"lossless\", \"gist\" or "
           "\"fp8\"", memory.activation_encoding);
  TS_CHECK(std::isfinite(memory.ram_budget_mb) && memory.ram_budget_mb >= 0.0f && memory.ram_budget_mb <= 1e9f,
           "config: memory.ram_budget_mb = {} must be a size in MiB (0: the memory the machine has available)",
           memory.ram_budget_mb);
  TS_CHECK(memory.offload_dir.empty() || memory.offloads(),
           "config: memory.offload_dir = '{}' is read when something is offloaded (memory.offload_activations, "
           "memory.offload_optimizer or memory.offload_params = \"nvme\"); set one, or leave the folder out",
           memory.offload_dir);
  TS_CHECK(memory.offload_optimizer == "none" || memory.offload_optimizer == "nvme",
           "config: memory.offload_optimizer = \"{}\" is not known; use \"none\" or \"nvme\"", memory.offload_optimizer);
  TS_CHECK(memory.offload_params == "none" || memory.offload_params == "nvme",
           "config: memory.offload_params = \"{}\" is not known; use \"none\" or \"nvme\"", memory.offload_params);
  TS_CHECK(std::isfinite(memory.offload_chunk_mb) && memory.offload_chunk_mb >= 0.01f && memory.offload_chunk_mb <= 1e6f,
           "config: memory.offload_chunk_mb = {} must be a size in MiB, at least 0.01", memory.offload_chunk_mb);
  const bool sharded = parallel.zero_stage >= 1 || parallel.tp > 1 || parallel.ep > 1;
  const std::string sharding = parallel.zero_stage >= 1 ? fmt::format("ZeRO stage {}", parallel.zero_stage)
                               : parallel.tp > 1       ? "tensor parallelism"
                                                       : "expert parallelism";
  check_range<int64_t>("optim.delayed_update_after", optim.delayed_update_after, 0, int64_t{1} << 40);
  // The same rule of three for an update on its own thread: the main thread's collectives run
  // beside it, so it must not sum statistics over ranks.
  TS_CHECK(optim.delayed_update_after == 0 || optim::updates_elementwise(optim.kind) || !sharded,
           "config: optim.delayed_update_after with optim.name = \"{}\" under {}: its step sums per-tensor statistics "
           "over the ranks that hold a tensor's parts, which an update on its own thread cannot do beside the next "
           "step's collectives; delay adamw or sgd there, or {} without sharding",
           optim::optimizer_name(optim.kind), sharding, optim::optimizer_name(optim.kind));
  // Every setting of the matrix is valid on its own by now; the pairs that do not run together
  // are the compatibility table's (config/compatibility.h), which docs/compatibility.md prints.
  if (const auto refusal = config::compatibility_refusal(feature_settings())) TS_FAIL("config: {}", *refusal);
  // After the table, whose pairs (offloaded parameters with such an optimizer) say it first.
  if (memory.offload_optimizer != "none") {
    // Beside the compatibility table's pairs, a rule of three: an optimizer with per-tensor statistics,
    // an offloaded state and a sharding.
    TS_CHECK(optim::updates_elementwise(optim.kind) || !sharded,
             "config: memory.offload_optimizer = \"{}\" with optim.name = \"{}\" under {}: its per-tensor statistics are "
             "summed over the ranks that hold a tensor's parts, in collectives an offloaded state's chunked step "
             "would split differently on each rank; offload adamw or sgd there, or {} without sharding",
             memory.offload_optimizer, optim::optimizer_name(optim.kind), sharding, optim::optimizer_name(optim.kind));
  }
  // What offloaded parameters need beside the table's pairs: ZeRO-3 (not a feature at stage 0) and
  // the offloaded optimizer that streams their values.
  TS_CHECK(memory.offload_params == "none" || parallel.zero_stage == 3,
           "config: memory.offload_params moves ZeRO-3's parameter shards; set parallel.zero_stage = 3 (at dp 1 the "
           "shard is the whole model), not {}", parallel.zero_stage);
  TS_CHECK(memory.offload_params == "none" || memory.offload_optimizer == "nvme",
           "config: memory.offload_params = \"{}\" keeps the master values in the nvme tier, which the offloaded "
           "optimizer streams through memory with its state; set memory.offload_optimizer = \"nvme\" too",
           memory.offload_params);
  {
    // The generator's own limit, here so that the run is refused when its config is read.
    const int64_t microbatches = train.batch_size / (int64_t{train.micro_batch_size} * parallel.dp);
    TS_CHECK(parallel.schedule != config::ScheduleKind::PipeDream2BW || microbatches >= parallel.pp,
             "config: parallel.schedule = \"2bw\" with parallel.pp = {} needs at least as many microbatches per "
             "step as stages, but train.batch_size / (train.micro_batch_size × parallel.dp) = {}: with fewer, the "
             "first stage starts batch b + 2 before batch b has left it, so three weight versions would be alive "
             "instead of two; for example set train.batch_size = {}",
             parallel.pp, microbatches, int64_t{parallel.pp} * train.micro_batch_size * parallel.dp);
  }
  TS_CHECK(!train.overwrite || checkpoint.resume.empty(),
           "config: train.overwrite = true starts over and deletes the earlier run, while checkpoint.resume = \"{}\" "
           "continues it; set only one of them", checkpoint.resume);
  TS_CHECK(train.init_from.empty() || checkpoint.resume.empty() || checkpoint.resume == "auto",
           "config: train.init_from = '{}' and checkpoint.resume = '{}' are both set. init_from starts a new run from "
           "a checkpoint's weights alone (step 0, fresh optimizer and data order); resume continues a run where its "
           "checkpoint left it (weights, optimizer, step and data position). Set only one, or checkpoint.resume = "
           "\"auto\" to start from init_from the first time and resume the run's own checkpoints after",
           train.init_from, checkpoint.resume);
  check_range<int64_t>("checkpoint.every", checkpoint.every, 0, int64_t{1} << 40);
  check_range("checkpoint.keep", checkpoint.keep, 1, 1 << 20);
  check_range("log.every", log.every, 1, 1 << 30);
  TS_CHECK(std::isfinite(log.peak_gflops) && log.peak_gflops >= 0.0f,
           "config: log.peak_gflops = {} must be 0 (calibrate) or the matmul GFLOP/s of one process", log.peak_gflops);
  TS_CHECK(log.progress == "auto" || log.progress == "bar" || log.progress == "plain",
           "config: log.progress = '{}' must be \"auto\", \"bar\" or \"plain\"", log.progress);
}

config::FeatureSettings RunConfig::feature_settings() const {
  config::FeatureSettings s;
  s.tp = parallel.tp;
  s.sp = parallel.sp;
  s.ep = parallel.ep;
  s.pp = parallel.pp;
  s.zero_stage = parallel.zero_stage;
  s.schedule = std::string(config::schedule_name(parallel.schedule));
  s.compression = std::string(config::compression_name(parallel.compression));
  s.grad_dtype = parallel.grad_dtype;
  s.compute = precision.compute;
  s.recompute = std::string(memory::recompute_policy_name(memory.recompute));
  s.optimizer = optim.kind;
  s.moe_experts = model.moe_experts;
  s.offload_activations = memory.offload_activations;
  s.offload_optimizer = memory.offload_optimizer;
  s.offload_params = memory.offload_params;
  s.activation_encoding = memory.activation_encoding;
  s.delayed_update_after = optim.delayed_update_after;
  return s;
}

config::ParallelLayout RunConfig::layout() const {
  config::ParallelLayout l;
  l.dp = parallel.dp;
  l.tp = parallel.tp;
  l.sp = parallel.sp;
  l.ep = parallel.ep;
  l.pp = parallel.pp;
  l.zero_stage = parallel.zero_stage;
  l.schedule = parallel.schedule;
  l.virtual_stages = parallel.virtual_stages;
  l.micro_batch = train.micro_batch_size;
  l.global_batch = train.batch_size;
  return l;
}

namespace {

// Parses one override value as TOML ("12", "1e-3", "true", "\"x\"", "[1, 2]"); a bare word that is
// not valid TOML is taken as a string so `--data.dir data/kjv` works without quotes.
toml::node_view<toml::node> parse_value(toml::table& holder, const std::string& value) {
  try {
    holder = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    holder = toml::table{{"v", value}};
  }
  return holder["v"];
}

}  // namespace

void apply_overrides(toml::table& table, const std::vector<std::pair<std::string, std::string>>& overrides) {
  for (const auto& [key, value] : overrides) {
    TS_CHECK(!key.empty() && key.front() != '.' && key.back() != '.', "override '--{}' is not a dotted key like train.steps",
             key);
    toml::table* node = &table;
    std::stringstream parts(key);
    std::string part, last;
    std::vector<std::string> path;
    while (std::getline(parts, part, '.')) path.push_back(part);
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      toml::node* child = node->get(path[i]);
      if (child == nullptr) {
        node->insert(path[i], toml::table{});
        child = node->get(path[i]);
      }
      TS_CHECK(child->is_table(), "override '--{}': '{}' is not a section", key, path[i]);
      node = child->as_table();
    }
    toml::table holder;
    auto v = parse_value(holder, value);
    node->insert_or_assign(path.back(), *v.node());
  }
}

namespace {

// parallel.dp when the config leaves it out: every process of the job not taken by tp and pp is a
// data-parallel rank (Megatron's rule), so `tessera launch -n 8 -- train --parallel.tp 2
// --parallel.pp 2` runs dp = 2.
int data_parallel_of_world(int world_size, const ParallelSection& p) {
  check_range("parallel.tp", p.tp, 1, 1 << 10);
  check_range("parallel.pp", p.pp, 1, 1 << 10);
  const int64_t model_parallel = int64_t{p.tp} * p.pp;
  TS_CHECK(world_size % model_parallel == 0,
           "config: parallel.dp is left out, so it is the job's {} processes over parallel.tp × parallel.pp = {} × {} "
           "= {}, which does not divide them; start a multiple of {} processes (tessera launch -n {}), or set "
           "parallel.dp, parallel.tp and parallel.pp so that their product is {}",
           world_size, p.tp, p.pp, model_parallel, model_parallel, (world_size / model_parallel + 1) * model_parallel,
           world_size);
  return static_cast<int>(world_size / model_parallel);
}

}  // namespace

RunConfig read_run_config(const toml::table& table, int world_size) {
  RunConfig c;
  TableReader root(table, "");
  c.vocab_from_data = !root.table("model").has("vocab_size");
  c.model = config::read_model_config(root.table("model"));
  {
    TableReader r = root.table("data");
    c.data.dir = r.get("dir", c.data.dir);
    r.finish();
  }
  {
    TableReader r = root.table("train");
    auto& t = c.train;
    t.steps = r.get("steps", t.steps);
    t.exit_after = r.get("exit_after", t.exit_after);
    t.max_minutes = r.get("max_minutes", t.max_minutes);
    t.overwrite = r.get("overwrite", t.overwrite);
    t.allow_changes = r.get("allow_changes", t.allow_changes);
    t.batch_size = r.get("batch_size", t.batch_size);
    t.micro_batch_size = r.get("micro_batch_size", t.micro_batch_size);
    t.seed = static_cast<uint64_t>(r.get<int64_t>("seed", static_cast<int64_t>(t.seed)));
    t.out_dir = r.get("out_dir", t.out_dir);
    t.eval_every = r.get("eval_every", t.eval_every);
    t.eval_batches = r.get("eval_batches", t.eval_batches);
    t.sample_every = r.get("sample_every", t.sample_every);
    t.sample_tokens = r.get("sample_tokens", t.sample_tokens);
    t.sample_temperature = r.get("sample_temperature", t.sample_temperature);
    t.sample_top_k = r.get("sample_top_k", t.sample_top_k);
    t.sample_prompt = r.get("sample_prompt", t.sample_prompt);
    t.init_from = r.get("init_from", t.init_from);
    r.finish();
  }
  {
    TableReader r = root.table("optim");
    auto& o = c.optim;
    o.kind = optimizer_kind_of(r.get("name", std::string(optim::optimizer_name(o.kind))));
    o.lr = r.get("lr", o.lr);
    o.min_lr = r.get("min_lr", o.min_lr);
    o.warmup_steps = r.get("warmup_steps", o.warmup_steps);
    o.weight_decay = r.get("weight_decay", o.weight_decay);
    o.beta1 = r.get("beta1", o.beta1);
    o.beta2 = r.get("beta2", o.beta2);
    o.eps = r.get("eps", o.eps);
    o.grad_clip = r.get("grad_clip", o.grad_clip);
    o.delayed_update_after = r.get("delayed_update_after", o.delayed_update_after);
    o.momentum = r.get("momentum", o.momentum);
    o.nesterov = r.get("nesterov", o.nesterov);
    o.decoupled_weight_decay = r.get("decoupled_weight_decay", o.decoupled_weight_decay);
    o.trust_coefficient = r.get("trust_coefficient", o.trust_coefficient);
    o.unadapted_lr_scale = r.get("unadapted_lr_scale", o.unadapted_lr_scale);
    o.first_moment = r.get("first_moment", o.first_moment);
    o.relative_step = r.get("relative_step", o.relative_step);
    o.decay_rate = r.get("decay_rate", o.decay_rate);
    o.clip_threshold = r.get("clip_threshold", o.clip_threshold);
    o.block_size = r.get("block_size", o.block_size);
    o.quantization = r.get("quantization", o.quantization);
    o.freeze_step = r.get("freeze_step", o.freeze_step);
    o.variance_freeze_step = r.get("variance_freeze_step", o.variance_freeze_step);
    r.finish();
  }
  {
    TableReader r = root.table("parallel");
    c.parallel.dp = r.get("dp", c.parallel.dp);
    c.parallel.tp = r.get("tp", c.parallel.tp);
    c.parallel.sp = r.get("sp", c.parallel.sp);
    c.parallel.ep = r.get("ep", c.parallel.ep);
    c.parallel.pp = r.get("pp", c.parallel.pp);
    c.parallel.stage_layers = r.get("stage_layers", c.parallel.stage_layers);
    c.parallel.zero_stage = r.get("zero_stage", c.parallel.zero_stage);
    c.parallel.schedule = schedule_kind_of(r.get("schedule", std::string(config::schedule_name(c.parallel.schedule))));
    c.parallel.virtual_stages = r.get("virtual_stages", c.parallel.virtual_stages);
    c.parallel.weight_version = r.get("weight_version", c.parallel.weight_version);
    c.parallel.bucket_mb = r.get("bucket_mb", c.parallel.bucket_mb);
    c.parallel.timeout_seconds = r.get("timeout_seconds", c.parallel.timeout_seconds);
    c.parallel.compression =
        config::parse_compression(r.get("compression", std::string(config::compression_name(c.parallel.compression))));
    c.parallel.grad_dtype = r.get("grad_dtype", c.parallel.grad_dtype);
    if (!r.has("dp") && world_size > 1) {
      c.parallel.dp = data_parallel_of_world(world_size, c.parallel);
      c.dp_from_world = true;
    }
    r.finish();
  }
  {
    TableReader r = root.table("compression");
    c.compression.ratio = r.get("ratio", c.compression.ratio);
    c.compression.levels = r.get("levels", c.compression.levels);
    c.compression.rank = r.get("rank", c.compression.rank);
    c.compression.warmup_steps = r.get("warmup_steps", c.compression.warmup_steps);
    r.finish();
  }
  {
    TableReader r = root.table("precision");
    auto& p = c.precision;
    p.compute = r.get("compute", p.compute);
    if (r.holds_string("loss_scale")) {
      p.loss_scale = r.get("loss_scale", p.loss_scale);
    } else if (r.has("loss_scale")) {
      p.loss_scale = fmt::format("{}", r.get("loss_scale", 0.0));
    }
    p.init_scale = r.get("init_scale", p.init_scale);
    p.growth_interval = r.get("growth_interval", p.growth_interval);
    p.growth_factor = r.get("growth_factor", p.growth_factor);
    p.backoff_factor = r.get("backoff_factor", p.backoff_factor);
    r.finish();
  }
  {
    TableReader r = root.table("memory");
    c.memory.recompute =
        recompute_policy_of(r.get("recompute", std::string(memory::recompute_policy_name(c.memory.recompute))));
    c.memory.recompute_every = r.get("recompute_every", c.memory.recompute_every);
    c.memory.activation_budget_mb = r.get("activation_budget_mb", c.memory.activation_budget_mb);
    c.memory.solver_seconds = r.get("solver_seconds", c.memory.solver_seconds);
    c.memory.offload_activations = r.get("offload_activations", c.memory.offload_activations);
    c.memory.activation_encoding = r.get("activation_encoding", c.memory.activation_encoding);
    c.memory.offload_optimizer = r.get("offload_optimizer", c.memory.offload_optimizer);
    c.memory.offload_params = r.get("offload_params", c.memory.offload_params);
    c.memory.offload_chunk_mb = r.get("offload_chunk_mb", c.memory.offload_chunk_mb);
    c.memory.offload_dir = r.get("offload_dir", c.memory.offload_dir);
    c.memory.ram_budget_mb = r.get("ram_budget_mb", c.memory.ram_budget_mb);
    r.finish();
  }
  {
    TableReader r = root.table("checkpoint");
    c.checkpoint.every = r.get("every", c.checkpoint.every);
    c.checkpoint.keep = r.get("keep", c.checkpoint.keep);
    c.checkpoint.resume = r.get("resume", c.checkpoint.resume);
    r.finish();
  }
  {
    TableReader r = root.table("log");
    c.log.every = r.get("every", c.log.every);
    c.log.progress = r.get("progress", c.log.progress);
    c.log.peak_gflops = r.get("peak_gflops", c.log.peak_gflops);
    c.log.timeline = r.get("timeline", c.log.timeline);
    c.log.profile = r.get("profile", c.log.profile);
    r.finish();
  }
  root.finish();
  c.validate();
  return c;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides,
                          int world_size) {
  toml::table table = path.empty() ? toml::table{} : config::parse_toml_file(path);
  apply_overrides(table, overrides);
  return read_run_config(table, world_size);
}

namespace {
// The shortest decimal that reads back as the same float, so 1e-3f is written 0.001 rather than
// 0.0010000000474974513.
double shortest(float f) { return std::stod(fmt::format("{}", f)); }

toml::array int_array(const std::vector<int64_t>& values) {
  toml::array a;
  for (int64_t v : values) a.push_back(v);
  return a;
}
}  // namespace

// precision.loss_scale is a word or a number, written back as it was given.
toml::table precision_table(const PrecisionSection& p) {
  toml::table t{{"compute", p.compute},
                {"init_scale", p.init_scale},
                {"growth_interval", p.growth_interval},
                {"growth_factor", p.growth_factor},
                {"backoff_factor", p.backoff_factor}};
  if (p.loss_scale == "dynamic") {
    t.insert("loss_scale", p.loss_scale);
  } else {
    t.insert("loss_scale", std::stod(p.loss_scale));
  }
  return t;
}

std::string to_toml(const RunConfig& c) {
  const auto& m = c.model;
  toml::table model{{"arch", config::architecture_name(m.arch)},
                    {"n_layer", m.n_layer},
                    {"n_head", m.n_head},
                    {"n_kv_head", m.n_kv_head},
                    {"n_embd", m.n_embd},
                    {"vocab_size", m.vocab_size},
                    {"seq_len", m.seq_len},
                    {"ffn_hidden", m.ffn_hidden},
                    {"bias", m.bias},
                    {"tied_embeddings", m.tied_embeddings},
                    {"dropout", shortest(m.dropout)},
                    {"norm_eps", shortest(m.norm_eps)},
                    {"rope_theta", shortest(m.rope_theta)}};
  // Resolved, so that the saved config says which MLP the run trained whatever the defaults become.
  model.insert("activation", config::activation_name(m.mlp_activation()));
  model.insert("moe_experts", m.moe_experts);
  model.insert("moe_top_k", m.moe_top_k);
  model.insert("moe_capacity_factor", shortest(m.moe_capacity_factor));
  model.insert("moe_every", m.moe_every);
  model.insert("moe_aux_loss_coef", shortest(m.moe_aux_loss_coef));
  model.insert("moe_z_loss_coef", shortest(m.moe_z_loss_coef));
  const auto& t = c.train;
  toml::table train{{"steps", t.steps},
                    {"exit_after", t.exit_after},
                    {"max_minutes", shortest(t.max_minutes)},
                    {"overwrite", t.overwrite},
                    {"allow_changes", t.allow_changes},
                    {"batch_size", t.batch_size},
                    {"micro_batch_size", t.micro_batch_size},
                    {"seed", static_cast<int64_t>(t.seed)},
                    {"out_dir", t.out_dir},
                    {"eval_every", t.eval_every},
                    {"eval_batches", t.eval_batches},
                    {"sample_every", t.sample_every},
                    {"sample_tokens", t.sample_tokens},
                    {"sample_temperature", shortest(t.sample_temperature)},
                    {"sample_top_k", t.sample_top_k},
                    {"sample_prompt", t.sample_prompt},
                    {"init_from", t.init_from}};
  const auto& o = c.optim;
  toml::table optim{{"name", std::string(optim::optimizer_name(o.kind))},
                    {"lr", shortest(o.lr)},
                    {"min_lr", shortest(o.min_lr)},
                    {"warmup_steps", o.warmup_steps},
                    {"weight_decay", shortest(o.weight_decay)},
                    {"beta1", shortest(o.beta1)},
                    {"beta2", shortest(o.beta2)},
                    {"eps", shortest(o.eps)},
                    {"grad_clip", shortest(o.grad_clip)},
                    {"delayed_update_after", o.delayed_update_after},
                    {"momentum", shortest(o.momentum)},
                    {"nesterov", o.nesterov},
                    {"decoupled_weight_decay", o.decoupled_weight_decay},
                    {"trust_coefficient", shortest(o.trust_coefficient)},
                    {"unadapted_lr_scale", shortest(o.unadapted_lr_scale)},
                    {"first_moment", o.first_moment},
                    {"relative_step", o.relative_step},
                    {"decay_rate", shortest(o.decay_rate)},
                    {"clip_threshold", shortest(o.clip_threshold)},
                    {"block_size", o.block_size},
                    {"quantization", o.quantization},
                    {"freeze_step", o.freeze_step},
                    {"variance_freeze_step", o.variance_freeze_step}};
  toml::table root{{"model", model},
                   {"data", toml::table{{"dir", c.data.dir}}},
                   {"train", train},
                   {"optim", optim},
                   {"parallel", toml::table{{"dp", c.parallel.dp},
                                            {"tp", c.parallel.tp},
                                            {"sp", c.parallel.sp},
                                            {"ep", c.parallel.ep},
                                            {"pp", c.parallel.pp},
                                            {"stage_layers", int_array(c.parallel.stage_layers)},
                                            {"zero_stage", c.parallel.zero_stage},
                                            {"schedule", std::string(config::schedule_name(c.parallel.schedule))},
                                            {"virtual_stages", c.parallel.virtual_stages},
                                            {"weight_version", c.parallel.weight_version},
                                            {"bucket_mb", shortest(c.parallel.bucket_mb)},
                                            {"timeout_seconds", shortest(c.parallel.timeout_seconds)},
                                            {"compression", std::string(config::compression_name(c.parallel.compression))},
                                            {"grad_dtype", c.parallel.grad_dtype}}},
                   {"precision", precision_table(c.precision)},
                   {"compression", toml::table{{"ratio", c.compression.ratio},
                                               {"levels", c.compression.levels},
                                               {"rank", c.compression.rank},
                                               {"warmup_steps", c.compression.warmup_steps}}},
                   {"memory", toml::table{{"recompute", std::string(memory::recompute_policy_name(c.memory.recompute))},
                                          {"recompute_every", c.memory.recompute_every},
                                          {"activation_budget_mb", shortest(c.memory.activation_budget_mb)},
                                          {"solver_seconds", c.memory.solver_seconds},
                                          {"offload_activations", c.memory.offload_activations},
                                          {"activation_encoding", c.memory.activation_encoding},
                                          {"offload_optimizer", c.memory.offload_optimizer},
                                          {"offload_params", c.memory.offload_params},
                                          {"offload_chunk_mb", shortest(c.memory.offload_chunk_mb)},
                                          {"offload_dir", c.memory.offload_dir},
                                          {"ram_budget_mb", shortest(c.memory.ram_budget_mb)}}},
                   {"checkpoint", toml::table{{"every", c.checkpoint.every},
                                              {"keep", c.checkpoint.keep},
                                              {"resume", c.checkpoint.resume}}},
                   {"log", toml::table{{"every", c.log.every},
                                       {"progress", c.log.progress},
                                       {"peak_gflops", shortest(c.log.peak_gflops)},
                                       {"timeline", c.log.timeline},
                                       {"profile", c.log.profile}}}};
  std::stringstream ss;
  ss << root << "\n";
  return ss.str();
}

config::PrecisionOptions RunConfig::precision_options() const {
  config::PrecisionOptions o;
  o.compute = config::parse_precision(precision.compute, "precision.compute");
  o.grad_dtype = config::parse_precision(parallel.grad_dtype, "parallel.grad_dtype");
  config::LossScaling& s = o.loss_scaling;
  s.enabled = o.compute == DType::F16;
  s.dynamic = precision.loss_scale == "dynamic";
  s.init_scale = s.dynamic ? precision.init_scale : std::stod(precision.loss_scale);
  s.growth_interval = precision.growth_interval;
  s.growth_factor = precision.growth_factor;
  s.backoff_factor = precision.backoff_factor;
  return o;
}

config::CompressionOptions RunConfig::compression_options() const {
  config::CompressionOptions o;
  o.method = parallel.compression;
  if (compression.ratio != 0) o.ratio = compression.ratio;
  if (compression.levels != 0) o.levels = compression.levels;
  if (compression.rank != 0) o.rank = compression.rank;
  o.warmup_steps = compression.warmup_steps;
  o.seed = train.seed;
  return o;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  const toml::table resolved = toml::parse(to_toml(RunConfig{}));
  for (const auto& [section, table] : resolved) {
    for (const auto& [key, value] : *table.as_table()) keys.push_back(std::string(section.str()) + "." + std::string(key.str()));
  }
  return keys;
}

}  // namespace tessera::train
