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

// The optimizer's name, and no key that the chosen optimizer would ignore set away from its default
// (as the recompute keys are refused for the policies that ignore them).
void validate_optimizer(const RunConfig& config) {
  const OptimSection& o = config.optim;
  const std::span<const std::string_view> names = optim::optimizer_names();
  TS_CHECK(std::find(names.begin(), names.end(), o.name) != names.end(),
           "config: optim.name = '{}' is not known; use {}", o.name, quoted_list(names, " or "));
  TS_CHECK(o.name != "adafactor" || o.first_moment || o.beta1 == optim::OptimizerConfig{}.beta1,
           "config: optim.beta1 is read by optim.name = \"adafactor\" only with optim.first_moment = true (the paper's "
           "Adafactor keeps no first moment); set optim.first_moment = true or remove optim.beta1");
  for (const ConfigKey& key : config_key_table()) {
    if (key.optimizers.empty() || holds_default(config, key)) continue;
    TS_CHECK(std::find(key.optimizers.begin(), key.optimizers.end(), o.name) != key.optimizers.end(),
             "config: {} is read by optim.name = {} only (it is \"{}\"); remove it or choose one of those", key.key,
             quoted_list(key.optimizers, " or "), o.name);
  }
  TS_CHECK(!o.nesterov || o.momentum > 0.0f,
           "config: optim.nesterov = true needs momentum: set optim.momentum (for example 0.9)");
  TS_CHECK(o.quantization == "dynamic" || o.quantization == "linear",
           "config: optim.quantization = '{}' is not known; use \"dynamic\" or \"linear\"", o.quantization);
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  // Each key on its own first, so that the checks across keys below meet only values in range.
  for (const ConfigKey& key : config_key_table()) check_declared_range(*this, key);
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
  if (const auto refusal = config::expert_parallel_refusal(model, parallel.ep)) TS_FAIL("config: {}", *refusal);
  TS_CHECK(parallel.dp % parallel.ep == 0,
           "config: parallel.ep = {} is carved out of the data-parallel ranks and must divide parallel.dp = {}; use an "
           "ep that divides dp", parallel.ep, parallel.dp);
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
  validate_optimizer(*this);
  TS_CHECK(optim.min_lr >= 0.0f && optim.min_lr <= optim.lr, "config: optim.min_lr = {} must be in [0, optim.lr = {}]",
           optim.min_lr, optim.lr);
  {
    const std::vector<std::string> schedules = {"1f1b", "gpipe", "interleaved", "zb-h1", "2bw"};
    TS_CHECK(std::find(schedules.begin(), schedules.end(), parallel.schedule) != schedules.end(),
             "config: parallel.schedule = '{}' is not known; use \"1f1b\", \"gpipe\", \"interleaved\", \"zb-h1\" "
             "or \"2bw\"",
             parallel.schedule);
  }
  TS_CHECK(parallel.weight_version == "newest" || parallel.weight_version == "delayed",
           "config: parallel.weight_version = '{}' is not known; use \"newest\" (a microbatch reads the newest "
           "weights its stage holds) or \"delayed\" (all of batch b reads version b - 1)",
           parallel.weight_version);
  TS_CHECK(parallel.weight_version == "newest" || parallel.schedule == "2bw",
           "config: parallel.weight_version = \"{}\" chooses between PipeDream-2BW's two weight versions, but "
           "parallel.schedule = \"{}\" keeps one; set parallel.schedule = \"2bw\" or leave parallel.weight_version out",
           parallel.weight_version, parallel.schedule);
  TS_CHECK(parallel.virtual_stages == 1 || parallel.schedule == "interleaved",
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
    TS_CHECK(parallel.pp == 1 || parallel.schedule != "interleaved" || microbatches % parallel.pp == 0,
             "config: the interleaved schedule with parallel.pp = {} needs the microbatches per step, train.batch_size "
             "/ (train.micro_batch_size × parallel.dp) = {}, to be a multiple of parallel.pp; for example set "
             "train.batch_size = {}",
             parallel.pp, microbatches,
             (microbatches / parallel.pp + 1) * parallel.pp * int64_t{train.micro_batch_size} * parallel.dp);
  }
  {
    const config::CompressionMethod method = config::parse_compression(parallel.compression);
    const auto refuse_unread = [&](bool given, std::string_view key, config::CompressionMethod reader) {
      TS_CHECK(!given || method == reader, "config: compression.{} is read by parallel.compression = \"{}\" only (it "
               "is \"{}\")", key, config::compression_name(reader), parallel.compression);
    };
    refuse_unread(compression.ratio != 0, "ratio", config::CompressionMethod::TopK);
    refuse_unread(compression.levels != 0, "levels", config::CompressionMethod::Qsgd);
    refuse_unread(compression.rank != 0, "rank", config::CompressionMethod::PowerSgd);
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
    TS_CHECK(grad_dtype == DType::F32 || parallel.dp > 1, "config: parallel.grad_dtype = \"{}\" sets the dtype of the "
             "data-parallel gradient reduction, and parallel.dp = 1 has none; leave it \"fp32\"", parallel.grad_dtype);
  }
  {
    const std::vector<std::string> policies = {"none", "full", "every_k", "selective", "optimal", "dtr", "checkmate"};
    TS_CHECK(std::find(policies.begin(), policies.end(), memory.recompute) != policies.end(),
             "config: memory.recompute = '{}' is not known; use \"none\", \"full\", \"every_k\", \"selective\", "
             "\"optimal\", \"dtr\" or \"checkmate\"",
             memory.recompute);
  }
  TS_CHECK(memory.recompute_every == 0 || memory.recompute == "every_k",
           "config: memory.recompute_every = {} is read by memory.recompute = \"every_k\" only (it is \"{}\")",
           memory.recompute_every, memory.recompute);
  const bool budgeted = memory.recompute == "optimal" || memory.recompute == "dtr" || memory.recompute == "checkmate";
  TS_CHECK(memory.recompute != "optimal" || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"optimal\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) the schedule may use; it then recomputes as little as that budget allows");
  TS_CHECK(memory.recompute != "dtr" || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"dtr\" needs memory.activation_budget_mb: the activation memory (MiB per "
           "microbatch) DTR evicts to stay within");
  TS_CHECK(memory.recompute != "checkmate" || memory.activation_budget_mb > 0.0f,
           "config: memory.recompute = \"checkmate\" needs memory.activation_budget_mb: the activation memory (MiB "
           "per microbatch) Checkmate's schedule may use");
  TS_CHECK(memory.activation_budget_mb == 0.0f || budgeted,
           "config: memory.activation_budget_mb is read by memory.recompute = \"optimal\", \"dtr\" or "
           "\"checkmate\" only (it is \"{}\")",
           memory.recompute);
  TS_CHECK(memory.solver_seconds == MemorySection{}.solver_seconds || memory.recompute == "checkmate",
           "config: memory.solver_seconds = {} is read by memory.recompute = \"checkmate\" only (it is \"{}\")",
           memory.solver_seconds, memory.recompute);
  TS_CHECK(memory.offload_activations == "none" || memory.offload_activations == "nvme" ||
               memory.offload_activations == "auto",
           "config: memory.offload_activations = \"{}\" is not known; use \"none\", \"nvme\" or \"auto\"",
           memory.offload_activations);
  TS_CHECK(memory.offload_activations != "auto" || memory.recompute != "none",
           "config: memory.offload_activations = \"auto\" plans offloading together with memory.recompute = "
           "\"optimal\" under memory.activation_budget_mb; set those, or offload every unit with \"nvme\"");
  TS_CHECK(memory.activation_encoding == "none" || memory.activation_encoding == "lossless" ||
               memory.activation_encoding == "gist" || memory.activation_encoding == "fp8",
           "config: memory.activation_encoding = \"{}\" is not known; use \"none\", \"lossless\", \"gist\" or "
           "\"fp8\"", memory.activation_encoding);
  TS_CHECK(memory.offload_dir.empty() || memory.offloads(),
           "config: memory.offload_dir = '{}' is read when something is offloaded (memory.offload_activations, "
           "memory.offload_optimizer or memory.offload_params = \"nvme\"); set one, or leave the folder out",
           memory.offload_dir);
  TS_CHECK(memory.offload_optimizer == "none" || memory.offload_optimizer == "nvme",
           "config: memory.offload_optimizer = \"{}\" is not known; use \"none\" or \"nvme\"", memory.offload_optimizer);
  TS_CHECK(memory.offload_params == "none" || memory.offload_params == "nvme",
           "config: memory.offload_params = \"{}\" is not known; use \"none\" or \"nvme\"", memory.offload_params);
  const bool sharded = parallel.zero_stage >= 1 || parallel.tp > 1 || parallel.ep > 1;
  const std::string sharding = parallel.zero_stage >= 1 ? fmt::format("ZeRO stage {}", parallel.zero_stage)
                               : parallel.tp > 1       ? "tensor parallelism"
                                                       : "expert parallelism";
  // The same rule of three for an update on its own thread: the main thread's collectives run
  // beside it, so it must not sum statistics over ranks.
  TS_CHECK(optim.delayed_update_after == 0 || optim::updates_elementwise(optim.name) || !sharded,
           "config: optim.delayed_update_after with optim.name = \"{}\" under {}: its step sums per-tensor statistics "
           "over the ranks that hold a tensor's parts, which an update on its own thread cannot do beside the next "
           "step's collectives; delay adamw or sgd there, or {} without sharding",
           optim.name, sharding, optim.name);
  // Every setting of the matrix is valid on its own by now; the pairs that do not run together
  // are the compatibility table's (config/compatibility.h), which docs/compatibility.md prints.
  if (const auto refusal = config::compatibility_refusal(feature_settings())) TS_FAIL("config: {}", *refusal);
  // After the table, whose pairs (offloaded parameters with such an optimizer) say it first.
  if (memory.offload_optimizer != "none") {
    // Beside the compatibility table's pairs, a rule of three: an optimizer with per-tensor statistics,
    // an offloaded state and a sharding.
    TS_CHECK(optim::updates_elementwise(optim.name) || !sharded,
             "config: memory.offload_optimizer = \"{}\" with optim.name = \"{}\" under {}: its per-tensor statistics are "
             "summed over the ranks that hold a tensor's parts, in collectives an offloaded state's chunked step "
             "would split differently on each rank; offload adamw or sgd there, or {} without sharding",
             memory.offload_optimizer, optim.name, sharding, optim.name);
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
    TS_CHECK(parallel.schedule != "2bw" || microbatches >= parallel.pp,
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
  s.schedule = parallel.schedule;
  s.compression = parallel.compression;
  s.grad_dtype = parallel.grad_dtype;
  s.compute = precision.compute;
  s.recompute = memory.recompute;
  s.optimizer = optim.name;
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
  l.schedule = config::parse_schedule_kind(parallel.schedule);
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
  o.method = config::parse_compression(parallel.compression);
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
