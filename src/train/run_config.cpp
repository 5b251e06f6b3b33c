#include "train/run_config.h"

#include "config/compatibility.h"
#include "config/expert_parallel_shape.h"
#include "config/tensor_parallel_shape.h"
#include "train/config_keys.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "optim/optimizer_config.h"

namespace tessera::train {

using config::TableReader;

namespace {

std::string quoted_list(std::span<const std::string_view> names, std::string_view last_join) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == names.size() ? last_join : ", ", names[i]);
  }
  return out;
}

// No key that the chosen optimizer would ignore set away from its default (as the recompute keys
// are refused for the policies that ignore them), and the schedule's last rate.
void validate_optimizer(const RunConfig& config) {
  const OptimSection& o = config.optim;
  TS_CHECK(o.kind != optim::OptimizerKind::Adafactor || o.first_moment || o.beta1 == optim::OptimizerConfig{}.beta1,
           "config: optim.beta1 is read by optim.name = \"adafactor\" only with optim.first_moment = true (the paper's "
           "Adafactor keeps no first moment); set optim.first_moment = true or remove optim.beta1");
  for (const ConfigKey& key : config_key_table()) {
    if (key.optimizers.empty() || holds_default(config, key)) continue;
    if (std::find(key.optimizers.begin(), key.optimizers.end(), o.kind) != key.optimizers.end()) continue;
    std::vector<std::string_view> readers;
    for (optim::OptimizerKind reader : key.optimizers) readers.push_back(optim::optimizer_name(reader));
    TS_FAIL("config: {} is read by optim.name = {} only (it is \"{}\"); remove it or choose one of those", key.key,
            quoted_list(readers, " or "), optim::optimizer_name(o.kind));
  }
  TS_CHECK(!o.nesterov || o.momentum > 0.0f,
           "config: optim.nesterov = true needs momentum: set optim.momentum (for example 0.9)");
  TS_CHECK(o.quantization == "dynamic" || o.quantization == "linear",
           "config: optim.quantization = '{}' is not known; use \"dynamic\" or \"linear\"", o.quantization);
  TS_CHECK(o.min_lr >= 0.0f && o.min_lr <= o.lr, "config: optim.min_lr = {} must be in [0, optim.lr = {}]", o.min_lr,
           o.lr);
}

// tp, sp and ep against the model and the data-parallel ranks, and the global batch against the
// microbatches of every rank.
void check_parallel_shape(const RunConfig& c) {
  if (const auto refusal = config::tensor_parallel_refusal(c.model, c.parallel.tp)) TS_FAIL("config: {}", *refusal);
  if (c.parallel.sp && c.parallel.tp == 1) {
    std::vector<int> sizes = config::tensor_parallel_sizes(c.model, 16);
    std::erase(sizes, 1);
    TS_FAIL("config: parallel.sp = true shards the sequence over the tensor-parallel ranks, but parallel.tp = 1; set "
            "parallel.tp to 2 or more (values that work: {}) or parallel.sp = false",
            sizes.empty() ? std::string("none for this model") : fmt::format("{}", fmt::join(sizes, ", ")));
  }
  TS_CHECK(!c.parallel.sp || c.model.seq_len % c.parallel.tp == 0,
           "config: parallel.sp = true splits every sequence into parallel.tp = {} equal parts, but model.seq_len = {} "
           "does not divide by {}; set model.seq_len to a multiple of {} (for example {}) or parallel.sp = false",
           c.parallel.tp, c.model.seq_len, c.parallel.tp, c.parallel.tp,
           (c.model.seq_len / c.parallel.tp + 1) * c.parallel.tp);
  if (const auto refusal = config::expert_parallel_refusal(c.model, c.parallel.ep)) TS_FAIL("config: {}", *refusal);
  TS_CHECK(c.parallel.dp % c.parallel.ep == 0,
           "config: parallel.ep = {} is carved out of the data-parallel ranks and must divide parallel.dp = {}; use an "
           "ep that divides dp", c.parallel.ep, c.parallel.dp);
  // In 64 bits: each factor is in range, their product need not fit an int.
  const int64_t per_round = int64_t{c.train.micro_batch_size} * c.parallel.dp;
  if (c.train.batch_size % per_round != 0) {
    // A smaller microbatch keeps the global batch (and so the run's numbers); a larger batch changes them.
    const int64_t larger_batch = (c.train.batch_size / per_round + 1) * per_round;
    std::string fix = fmt::format("set train.batch_size = {} (a larger global batch)", larger_batch);
    if (c.train.batch_size % c.parallel.dp == 0) {
      const int64_t per_rank = c.train.batch_size / c.parallel.dp;
      int64_t micro = std::min<int64_t>(c.train.micro_batch_size, per_rank);
      while (per_rank % micro != 0) --micro;
      fix = fmt::format("set train.micro_batch_size = {}, which keeps the global batch of {} ({} × dp {} × {} "
                        "microbatches), or {}", micro, c.train.batch_size, micro, c.parallel.dp, per_rank / micro, fix);
    }
    TS_FAIL("config: train.batch_size ({}) must be a multiple of train.micro_batch_size × parallel.dp ({} × {} = {}); "
            "{}", c.train.batch_size, c.train.micro_batch_size, c.parallel.dp, per_round, fix);
  }
}

// The schedule, its weight versions and how the layers are cut into stages.
void check_pipeline(const RunConfig& c) {
  using config::ScheduleKind;
  TS_CHECK(c.parallel.weight_version == "newest" || c.parallel.weight_version == "delayed",
           "config: parallel.weight_version = '{}' is not known; use \"newest\" (a microbatch reads the newest "
           "weights its stage holds) or \"delayed\" (all of batch b reads version b - 1)",
           c.parallel.weight_version);
  TS_CHECK(c.parallel.weight_version == "newest" || c.parallel.schedule == ScheduleKind::PipeDream2BW,
           "config: parallel.weight_version = \"{}\" chooses between PipeDream-2BW's two weight versions, but "
           "parallel.schedule = \"{}\" keeps one; set parallel.schedule = \"2bw\" or leave parallel.weight_version out",
           c.parallel.weight_version, config::schedule_name(c.parallel.schedule));
  TS_CHECK(c.parallel.virtual_stages == 1 || c.parallel.schedule == ScheduleKind::Interleaved,
           "config: parallel.virtual_stages = {} splits each rank's layers into chunks, which only the interleaved "
           "schedule runs; set parallel.schedule = \"interleaved\" or parallel.virtual_stages = 1",
           c.parallel.virtual_stages);
  TS_CHECK(c.parallel.virtual_stages <= c.model.n_layer,
           "config: parallel.virtual_stages = {} exceeds model.n_layer = {}: every chunk needs a block",
           c.parallel.virtual_stages, c.model.n_layer);
  // In 64 bits: both factors are in range, their product need not be.
  const int64_t stages = int64_t{c.parallel.pp} * c.parallel.virtual_stages;
  TS_CHECK(stages <= c.model.n_layer,
           "config: parallel.pp × parallel.virtual_stages = {} × {} = {} stages, but model.n_layer = {}: every stage "
           "needs at least one block; use fewer stages or more layers",
           c.parallel.pp, c.parallel.virtual_stages, stages, c.model.n_layer);
  if (!c.parallel.stage_layers.empty()) {
    int64_t sum = 0;
    for (int64_t blocks : c.parallel.stage_layers) {
      TS_CHECK(blocks >= 1 && blocks <= c.model.n_layer,
               "config: parallel.stage_layers holds {}: every stage needs between 1 and model.n_layer = {} blocks",
               blocks, c.model.n_layer);
      sum += blocks;
    }
    TS_CHECK(static_cast<int64_t>(c.parallel.stage_layers.size()) == stages && sum == c.model.n_layer,
             "config: parallel.stage_layers = {} gives {} stages of {} blocks in all, but the layout has pp × "
             "virtual_stages = {} stages and the model {} blocks; list one block count per stage, summing to "
             "model.n_layer (or leave it out for a split balanced by the cost model)",
             fmt::format("[{}]", fmt::join(c.parallel.stage_layers, ", ")), c.parallel.stage_layers.size(), sum, stages,
             c.model.n_layer);
  }
  const int64_t microbatches = c.train.batch_size / (int64_t{c.train.micro_batch_size} * c.parallel.dp);
  TS_CHECK(c.parallel.pp == 1 || c.parallel.schedule != config::ScheduleKind::Interleaved ||
               microbatches % c.parallel.pp == 0,
           "config: the interleaved schedule with parallel.pp = {} needs the microbatches per step, train.batch_size "
           "/ (train.micro_batch_size × parallel.dp) = {}, to be a multiple of parallel.pp; for example set "
           "train.batch_size = {}",
           c.parallel.pp, microbatches,
           (microbatches / c.parallel.pp + 1) * c.parallel.pp * int64_t{c.train.micro_batch_size} * c.parallel.dp);
}

// The compressor's keys, each read by one method.
void check_compression(const RunConfig& c) {
  const config::CompressionMethod method = c.parallel.compression;
  const auto refuse_unread = [&](bool given, std::string_view key, config::CompressionMethod reader) {
    TS_CHECK(!given || method == reader, "config: compression.{} is read by parallel.compression = \"{}\" only (it "
             "is \"{}\")", key, config::compression_name(reader), config::compression_name(method));
  };
  refuse_unread(c.compression.ratio != 0, "ratio", config::CompressionMethod::TopK);
  refuse_unread(c.compression.levels != 0, "levels", config::CompressionMethod::Qsgd);
  refuse_unread(c.compression.rank != 0, "rank", config::CompressionMethod::PowerSgd);
  TS_CHECK(method != config::CompressionMethod::None || c.compression.warmup_steps == 0,
           "config: compression.warmup_steps is read when parallel.compression is not \"none\"");
}

// The loss-scaling keys, read by fp16 only, and the dtype of the gradient reduction.
void check_precision(const RunConfig& c) {
  const DType compute = config::parse_precision(c.precision.compute, "precision.compute");
  const DType grad_dtype = config::parse_precision(c.parallel.grad_dtype, "parallel.grad_dtype");
  const PrecisionSection defaults;
  const auto refuse_unread = [&](bool given, std::string_view key) {
    TS_CHECK(!given || compute == DType::F16, "config: precision.{} is read by precision.compute = \"fp16\" only (it "
             "is \"{}\"): bf16 has the range of fp32 and needs no loss scaling", key, c.precision.compute);
  };
  refuse_unread(c.precision.loss_scale != defaults.loss_scale, "loss_scale");
  refuse_unread(c.precision.init_scale != defaults.init_scale, "init_scale");
  refuse_unread(c.precision.growth_interval != defaults.growth_interval, "growth_interval");
  refuse_unread(c.precision.growth_factor != defaults.growth_factor, "growth_factor");
  refuse_unread(c.precision.backoff_factor != defaults.backoff_factor, "backoff_factor");
  if (c.precision.loss_scale != "dynamic") {
    double fixed = 0;
    try {
      size_t used = 0;
      fixed = std::stod(c.precision.loss_scale, &used);
      if (used != c.precision.loss_scale.size()) fixed = 0;
    } catch (const std::exception&) {
      fixed = 0;
    }
    TS_CHECK(std::isfinite(fixed) && fixed >= 1.0 && fixed <= 1e30, "config: precision.loss_scale = '{}' must be "
             "\"dynamic\" or a fixed scale of at least 1 (e.g. 1024)", c.precision.loss_scale);
  }
  TS_CHECK(grad_dtype == DType::F32 || c.parallel.dp > 1, "config: parallel.grad_dtype = \"{}\" sets the dtype of the "
           "data-parallel gradient reduction, and parallel.dp = 1 has none; leave it \"fp32\"", c.parallel.grad_dtype);
}

// The recompute policy and the keys it reads; what is offloaded, and where.
void check_memory(const RunConfig& c) {
  using config::RecomputePolicy;
  const std::string_view recompute = config::recompute_policy_name(c.memory.recompute);
  TS_CHECK(c.memory.recompute_every == 0 || c.memory.recompute == RecomputePolicy::EveryK,
           "config: memory.recompute_every = {} is read by memory.recompute = \"every_k\" only (it is \"{}\")",
           c.memory.recompute_every, recompute);
  const bool budgeted = config::recompute_takes_budget(c.memory.recompute);
  TS_CHECK(c.memory.recompute != RecomputePolicy::Optimal || c.memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"optimal\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) the schedule may use; it then recomputes as little as that budget allows");
  TS_CHECK(c.memory.recompute != RecomputePolicy::Dtr || c.memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"dtr\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) DTR evicts to stay within");
  TS_CHECK(c.memory.recompute != RecomputePolicy::Checkmate || c.memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"checkmate\" needs memory.activation_budget_mb: the activation memory (MiB "
           "per microbatch) Checkmate's schedule may use");
  TS_CHECK(c.memory.activation_budget_mb == 0.0f || budgeted,
           "config: memory.activation_budget_mb is read by memory.recompute = \"optimal\", \"dtr\" or "
           "\"checkmate\" only (it is \"{}\")",
           recompute);
  TS_CHECK(c.memory.solver_seconds == MemorySection{}.solver_seconds || c.memory.recompute == RecomputePolicy::Checkmate,
           "config: memory.solver_seconds = {} is read by memory.recompute = \"checkmate\" only (it is \"{}\")",
           c.memory.solver_seconds, recompute);
  TS_CHECK(c.memory.offload_activations == "none" || c.memory.offload_activations == "nvme" ||
               c.memory.offload_activations == "auto",
           "config: memory.offload_activations = \"{}\" is not known; use \"none\", \"nvme\" or \"auto\"",
           c.memory.offload_activations);
  TS_CHECK(c.memory.offload_activations != "auto" || c.memory.recompute != RecomputePolicy::None,
           "config: memory.offload_activations = \"auto\" plans offloading together with memory.recompute = "
           "\"optimal\" under memory.activation_budget_mb; set those, or offload every unit with \"nvme\"");
  TS_CHECK(c.memory.activation_encoding == "none" || c.memory.activation_encoding == "lossless" ||
               c.memory.activation_encoding == "gist" || c.memory.activation_encoding == "fp8",
           "config: memory.activation_encoding = \"{}\" is not known; use \"none\", \"lossless\", \"gist\" or "
           "\"fp8\"", c.memory.activation_encoding);
  TS_CHECK(c.memory.offload_dir.empty() || c.memory.offloads(),
           "config: memory.offload_dir = '{}' is read when something is offloaded (memory.offload_activations, "
           "memory.offload_optimizer or memory.offload_params = \"nvme\"); set one, or leave the folder out",
           c.memory.offload_dir);
  TS_CHECK(c.memory.offload_optimizer == "none" || c.memory.offload_optimizer == "nvme",
           "config: memory.offload_optimizer = \"{}\" is not known; use \"none\" or \"nvme\"",
           c.memory.offload_optimizer);
  TS_CHECK(c.memory.offload_params == "none" || c.memory.offload_params == "nvme",
           "config: memory.offload_params = \"{}\" is not known; use \"none\" or \"nvme\"", c.memory.offload_params);
}

// What runs beside a sharded optimizer state: a delayed update, an offloaded state or parameters,
// and the pairs of the compatibility table.
void check_sharded_updates(const RunConfig& c) {
  const bool sharded = c.parallel.zero_stage >= 1 || c.parallel.tp > 1 || c.parallel.ep > 1;
  const std::string sharding = c.parallel.zero_stage >= 1 ? fmt::format("ZeRO stage {}", c.parallel.zero_stage)
                               : c.parallel.tp > 1        ? "tensor parallelism"
                                                          : "expert parallelism";
  TS_CHECK(!c.optim.delayed_update_extrapolate || c.optim.delayed_update_after > 0,
           "config: optim.delayed_update_extrapolate = true extrapolates the weights of a delayed update, and "
           "optim.delayed_update_after is 0 (no update is delayed): set optim.delayed_update_after to the step the "
           "delay starts from, or drop optim.delayed_update_extrapolate");
  // The same rule of three for an update on its own thread: the main thread's collectives run
  // beside it, so it must not sum statistics over ranks.
  TS_CHECK(c.optim.delayed_update_after == 0 || optim::updates_elementwise(c.optim.kind) || !sharded,
           "config: optim.delayed_update_after with optim.name = \"{}\" under {}: its step sums per-tensor statistics "
           "over the ranks that hold a tensor's parts, which an update on its own thread cannot do beside the next "
           "step's collectives; delay adamw or sgd there, or {} without sharding",
           optim::optimizer_name(c.optim.kind), sharding, optim::optimizer_name(c.optim.kind));
  // Every setting of the matrix is valid on its own by now; the pairs that do not run together
  // are the compatibility table's (config/compatibility.h), which docs/compatibility.md prints.
  if (const auto refusal = config::compatibility_refusal(c.feature_settings())) TS_FAIL("config: {}", *refusal);
  // After the table, whose pairs (offloaded parameters with such an optimizer) say it first.
  if (c.memory.offload_optimizer != "none") {
    // Beside the compatibility table's pairs, a rule of three: an optimizer with per-tensor statistics,
    // an offloaded state and a sharding.
    TS_CHECK(optim::updates_elementwise(c.optim.kind) || !sharded,
             "config: memory.offload_optimizer = \"{}\" with optim.name = \"{}\" under {}: its per-tensor statistics are "
             "summed over the ranks that hold a tensor's parts, in collectives an offloaded state's chunked step "
             "would split differently on each rank; offload adamw or sgd there, or {} without sharding",
             c.memory.offload_optimizer, optim::optimizer_name(c.optim.kind), sharding,
             optim::optimizer_name(c.optim.kind));
  }
  // What offloaded parameters need beside the table's pairs: ZeRO-3 (not a feature at stage 0) and
  // the offloaded optimizer that streams their values.
  TS_CHECK(c.memory.offload_params == "none" || c.parallel.zero_stage == 3,
           "config: memory.offload_params moves ZeRO-3's parameter shards; set parallel.zero_stage = 3 (at dp 1 the "
           "shard is the whole model), not {}", c.parallel.zero_stage);
  TS_CHECK(c.memory.offload_params == "none" || c.memory.offload_optimizer == "nvme",
           "config: memory.offload_params = \"{}\" keeps the master values in the nvme tier, which the offloaded "
           "optimizer streams through memory with its state; set memory.offload_optimizer = \"nvme\" too",
           c.memory.offload_params);
}

// PipeDream-2BW's limit of two weight versions alive: the generator's own, here so that the run is
// refused when its config is read.
void check_two_weight_versions(const RunConfig& c) {
  const int64_t microbatches = c.train.batch_size / (int64_t{c.train.micro_batch_size} * c.parallel.dp);
  TS_CHECK(c.parallel.schedule != config::ScheduleKind::PipeDream2BW || microbatches >= c.parallel.pp,
           "config: parallel.schedule = \"2bw\" with parallel.pp = {} needs at least as many microbatches per "
           "step as stages, but train.batch_size / (train.micro_batch_size × parallel.dp) = {}: with fewer, the "
           "first stage starts batch b + 2 before batch b has left it, so three weight versions would be alive "
           "instead of two; for example set train.batch_size = {}",
           c.parallel.pp, microbatches, int64_t{c.parallel.pp} * c.train.micro_batch_size * c.parallel.dp);
}

// How the run starts: over an earlier run, from it, or from another run's weights.
void check_start(const RunConfig& c) {
  TS_CHECK(!c.train.overwrite || c.checkpoint.resume.empty(),
           "config: train.overwrite = true starts over and deletes the earlier run, while checkpoint.resume = \"{}\" "
           "continues it; set only one of them", c.checkpoint.resume);
  TS_CHECK(c.train.init_from.empty() || c.checkpoint.resume.empty() || c.checkpoint.resume == "auto",
           "config: train.init_from = '{}' and checkpoint.resume = '{}' are both set. init_from starts a new run from "
           "a checkpoint's weights alone (step 0, fresh optimizer and data order); resume continues a run where its "
           "checkpoint left it (weights, optimizer, step and data position). Set only one, or checkpoint.resume = "
           "\"auto\" to start from init_from the first time and resume the run's own checkpoints after",
           c.train.init_from, c.checkpoint.resume);
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  // Each key on its own first, so that the checks across keys below meet only values in range.
  for (const ConfigKey& key : config_key_table()) check_declared_range(*this, key);
  check_parallel_shape(*this);
  validate_optimizer(*this);
  check_pipeline(*this);
  check_compression(*this);
  check_precision(*this);
  check_memory(*this);
  check_sharded_updates(*this);
  check_two_weight_versions(*this);
  check_start(*this);
  TS_CHECK(log.progress == "auto" || log.progress == "bar" || log.progress == "plain",
           "config: log.progress = '{}' must be \"auto\", \"bar\" or \"plain\"", log.progress);
}

config::FeatureSettings RunConfig::feature_settings() const {
  return {.tp = parallel.tp, .sp = parallel.sp, .ep = parallel.ep, .pp = parallel.pp, .zero_stage = parallel.zero_stage,
          .schedule = parallel.schedule, .compression = parallel.compression, .grad_dtype = parallel.grad_dtype,
          .compute = precision.compute, .recompute = memory.recompute, .optimizer = optim.kind,
          .offload_activations = memory.offload_activations, .offload_optimizer = memory.offload_optimizer,
          .offload_params = memory.offload_params, .activation_encoding = memory.activation_encoding,
          .delayed_update_after = optim.delayed_update_after, .moe_experts = model.moe_experts};
}

config::ParallelLayout RunConfig::layout() const {
  return {.dp = parallel.dp, .tp = parallel.tp, .pp = parallel.pp, .virtual_stages = parallel.virtual_stages,
          .sp = parallel.sp, .ep = parallel.ep, .zero_stage = parallel.zero_stage, .schedule = parallel.schedule,
          .micro_batch = train.micro_batch_size, .global_batch = train.batch_size};
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
int data_parallel_of_world(int world_size, const RunConfig& config) {
  const ParallelSection& p = config.parallel;
  check_declared_range(config, config_key("parallel.tp"));
  check_declared_range(config, config_key("parallel.pp"));
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
  c.model = config::read_model_config(root.table(std::string(kModelSection)));
  for (std::string_view section : config_sections()) {
    if (section == kModelSection) continue;
    TableReader reader = root.table(std::string(section));
    read_section(reader, section, c);
    reader.finish();
  }
  if (!table["parallel"]["dp"] && world_size > 1) {
    c.parallel.dp = data_parallel_of_world(world_size, c);
    c.dp_from_world = true;
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

std::string to_toml(const RunConfig& c) {
  std::stringstream ss;
  ss << resolved_table(c) << "\n";
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
  for (const ConfigKey& key : config_key_table()) keys.emplace_back(key.key);
  // to_toml's order: a TOML table keeps its keys sorted, and no section's name begins another's.
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace tessera::train
