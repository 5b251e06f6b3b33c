#include "plan/layout.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <vector>

#include <fmt/ranges.h>

#include "core/check.h"
#include "optim/make_optimizer.h"
#include "plan/compression_model.h"
#include "plan/pipeline_model.h"

namespace tessera::plan {

namespace {

constexpr const char* kLayoutKeys =
    "tp, pp, dp, v, mb, gb, zero, recompute, recompute_every, activation_budget_mb, sp, precision, schedule, flash, "
    "overlap, compression, compression_ratio, compression_rank, optimizer, activations, states, bucket_mb, ep";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int64_t parse_int(std::string_view key, std::string_view value) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  TS_CHECK(ec == std::errc() && ptr == value.data() + value.size(), "layout: '{}={}' needs a whole number", key, value);
  return out;
}

int parse_small(std::string_view key, std::string_view value) {
  int64_t v = parse_int(key, value);
  TS_CHECK(v >= 0 && v <= (int64_t{1} << 30), "layout: '{}={}' is out of range", key, value);
  return static_cast<int>(v);
}

double parse_mib(std::string_view key, std::string_view value) {
  double out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  TS_CHECK(ec == std::errc() && ptr == value.data() + value.size() && std::isfinite(out) && out >= 0,
           "layout: '{}={}' needs a number of MiB, 0 or more (for example {}=4096)", key, value, key);
  return out;
}

double parse_fraction(std::string_view key, std::string_view value) {
  double out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  TS_CHECK(ec == std::errc() && ptr == value.data() + value.size() && out > 0 && out <= 1,
           "layout: '{}={}' needs a fraction in (0, 1] (for example {}=0.01)", key, value, key);
  return out;
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "1" || value == "on" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "off" || value == "no") return false;
  TS_FAIL("layout: '{}={}' must be true or false", key, value);
}

std::string divisors_up_to(int64_t n, int64_t limit) {
  std::string out;
  for (int64_t d = 1; d <= n && d <= limit; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

}  // namespace

SelectiveRebuild selective_rebuild(const Layout& l) {
  if (l.recompute != config::RecomputePolicy::Selective) return SelectiveRebuild::Nothing;
  if (l.activations == ActivationAccounting::Engine) return SelectiveRebuild::NormsAndActivation;
  return l.flash_attention ? SelectiveRebuild::Nothing : SelectiveRebuild::AttentionCore;
}

std::string_view accounting_name(ActivationAccounting a) {
  return a == ActivationAccounting::Engine ? "engine" : "megatron";
}

std::string_view accounting_name(StateAccounting a) { return a == StateAccounting::Engine ? "engine" : "zero"; }

Layout parse_layout(std::string_view text, Layout l) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    TS_CHECK(eq != std::string_view::npos, "layout: '{}' is not key=value; known keys: {}", item, kLayoutKeys);
    std::string_view key = trim(item.substr(0, eq));
    std::string_view value = trim(item.substr(eq + 1));
    if (key == "tp") {
      l.tp = parse_small(key, value);
    } else if (key == "pp") {
      l.pp = parse_small(key, value);
    } else if (key == "dp") {
      l.dp = parse_small(key, value);
    } else if (key == "ep") {
      l.ep = parse_small(key, value);
    } else if (key == "v") {
      l.virtual_stages = parse_small(key, value);
    } else if (key == "mb") {
      l.micro_batch = parse_small(key, value);
    } else if (key == "gb") {
      l.global_batch = parse_int(key, value);
    } else if (key == "zero") {
      l.zero_stage = parse_small(key, value);
    } else if (key == "sp") {
      l.sp = parse_bool(key, value);
    } else if (key == "flash") {
      l.flash_attention = parse_bool(key, value);
    } else if (key == "overlap") {
      l.overlap = parse_bool(key, value);
    } else if (key == "optimizer") {
      const std::optional<optim::OptimizerKind> kind = config::find_optimizer_kind(value);
      TS_CHECK(kind.has_value(), "layout: 'optimizer={}' must be one of {}", value,
               fmt::join(optim::optimizer_names(), ", "));
      l.optimizer = *kind;
    } else if (key == "activations") {
      if (value == "engine") l.activations = ActivationAccounting::Engine;
      else if (value == "megatron") l.activations = ActivationAccounting::Megatron;
      else TS_FAIL("layout: 'activations={}' must be engine (this engine's saved tensors) or megatron (Megatron-LM's, "
                   "as Korthikanti et al. count them)", value);
    } else if (key == "states") {
      if (value == "zero") l.states = StateAccounting::Zero;
      else if (value == "engine") l.states = StateAccounting::Engine;
      else TS_FAIL("layout: 'states={}' must be zero (16-bit weights with fp32 master and Adam state, as ZeRO counts "
                   "them) or engine (this engine's allocations, as a tessera run measures them)", value);
    } else if (key == "bucket_mb") {
      l.bucket_mb = parse_mib(key, value);
    } else if (key == "recompute") {
      const std::optional<config::RecomputePolicy> policy = config::find_recompute_policy(value);
      if (policy) l.recompute = *policy;
      else TS_FAIL("layout: 'recompute={}' must be one of {}: every_k (with recompute_every=K), optimal, dtr and "
                   "checkmate (with activation_budget_mb=X)", value, config::recompute_policy_names());
    } else if (key == "recompute_every") {
      l.recompute_every = parse_small(key, value);
    } else if (key == "activation_budget_mb") {
      l.activation_budget_mb = parse_mib(key, value);
    } else if (key == "precision") {
      if (value == "bf16") l.precision = Precision::Bf16;
      else if (value == "fp32") l.precision = Precision::Fp32;
      else TS_FAIL("layout: 'precision={}' must be bf16 (with fp32 master weights) or fp32", value);
    } else if (key == "compression") {
      const std::optional<config::CompressionMethod> method = config::find_compression(value);
      TS_CHECK(method.has_value(), "layout: 'compression={}' must be none, topk (with compression_ratio=X), "
               "qsgd, onebit or powersgd (with compression_rank=R)", value);
      l.compression = *method;
    } else if (key == "compression_ratio") {
      l.compression_ratio = parse_fraction(key, value);
    } else if (key == "compression_rank") {
      l.compression_rank = parse_small(key, value);
    } else if (key == "schedule") {
      const std::optional<config::ScheduleKind> kind = config::find_schedule_kind(value);
      TS_CHECK(kind.has_value(), "layout: 'schedule={}' must be one of {} (1f1b with v > 1 is interleaved)", value,
               config::schedule_kind_names());
      l.schedule = *kind;
    } else {
      std::vector<std::string> keys = {"tp", "pp", "dp", "v", "mb", "gb", "zero", "recompute", "recompute_every",
                                       "activation_budget_mb", "sp", "precision", "schedule", "flash", "overlap",
                                       "compression", "compression_ratio", "compression_rank", "optimizer", "activations",
                                       "states", "bucket_mb"};
      std::string hint = config::closest_match(std::string(key), keys);
      TS_FAIL("layout: unknown key '{}'{}; known keys: {}", key, hint.empty() ? "" : "; did you mean '" + hint + "'?", kLayoutKeys);
    }
  }
  // v > 1 without another schedule named means interleaved 1F1B, so layouts written without
  // schedule= keep their meaning.
  if (l.virtual_stages > 1 && l.schedule == config::ScheduleKind::OneFOneB) {
    l.schedule = config::ScheduleKind::Interleaved;
  }
  return l;
}

std::string to_string(const Layout& l) {
  // The policy's parameters sit next to it, and only when set: every layout printed before they
  // existed prints the same. fmt's {} of a double is the shortest text that reads back exactly.
  std::string recompute(config::recompute_policy_name(l.recompute));
  if (l.recompute_every != 0) recompute += fmt::format(",recompute_every={}", l.recompute_every);
  if (l.activation_budget_mb != 0) recompute += fmt::format(",activation_budget_mb={}", l.activation_budget_mb);
  // Compression and the optimizer likewise, only when not the default: layouts without them
  // print as before.
  std::string extras;
  using config::CompressionMethod;
  if (l.compression != CompressionMethod::None) {
    extras = fmt::format(",compression={}", config::compression_name(l.compression));
    if (l.compression == CompressionMethod::TopK) extras += fmt::format(",compression_ratio={}", l.compression_ratio);
    if (l.compression == CompressionMethod::PowerSgd) extras += fmt::format(",compression_rank={}", l.compression_rank);
  }
  if (l.optimizer != optim::OptimizerKind::AdamW) extras += fmt::format(",optimizer={}", optim::optimizer_name(l.optimizer));
  if (l.ep != 1) extras += fmt::format(",ep={}", l.ep);
  if (l.activations != ActivationAccounting::Engine) extras += fmt::format(",activations={}", accounting_name(l.activations));
  if (l.states != StateAccounting::Zero) {
    extras += fmt::format(",states={},bucket_mb={}", accounting_name(l.states), l.bucket_mb);
  }
  return fmt::format("tp={},pp={},dp={},v={},mb={},gb={},zero={},recompute={},sp={},precision={},schedule={},flash={},overlap={}{}",
                     l.tp, l.pp, l.dp, l.virtual_stages, l.micro_batch, l.global_batch, l.zero_stage, recompute,
                     l.sp ? "true" : "false", precision_name(l.precision), schedule_name(l.schedule),
                     l.flash_attention ? "true" : "false", l.overlap ? "true" : "false", extras);
}

void check_layout(const config::ModelConfig& m, const Layout& l, int64_t devices) {
  const int v = l.virtual_stages;
  TS_CHECK(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && v >= 1 && l.micro_batch >= 1,
           "layout: tp, pp, dp, v and mb must all be at least 1 (got tp={} pp={} dp={} v={} mb={})", l.tp, l.pp, l.dp, v,
           l.micro_batch);
  TS_CHECK(l.global_batch >= 1, "layout: the global batch must be at least 1 sequence (got {})", l.global_batch);
  TS_CHECK(l.devices() == devices,
           "layout: tp={} x pp={} x dp={} = {} devices, but {} devices were asked for; make the product equal the device "
           "count (for example dp={})",
           l.tp, l.pp, l.dp, l.devices(), devices,
           devices % (int64_t{l.tp} * l.pp) == 0 ? std::to_string(devices / (int64_t{l.tp} * l.pp)) : std::string("?"));
  TS_CHECK(l.ep >= 1 && l.dp % l.ep == 0, "layout: ep={} must divide dp={} (expert parallelism is carved out of the "
           "data-parallel ranks)", l.ep, l.dp);
  TS_CHECK(l.ep == 1 || (m.moe_experts > 0 && m.moe_experts % l.ep == 0), "layout: ep={} needs an MoE model whose "
           "model.moe_experts it divides (the model has {})", l.ep, m.moe_experts);
  TS_CHECK(m.n_head % l.tp == 0, "layout: tp={} does not divide model.n_head={}; attention heads are split whole across "
           "tensor-parallel ranks, so pick tp among {}", l.tp, m.n_head, divisors_up_to(m.n_head, 1 << 20));
  TS_CHECK(m.kv_heads() % l.tp == 0, "layout: tp={} does not divide model.n_kv_head={}; each rank needs whole key/value "
           "heads for its query heads, so pick tp among {}", l.tp, m.kv_heads(), divisors_up_to(m.kv_heads(), 1 << 20));
  TS_CHECK(m.ffn() % l.tp == 0, "layout: tp={} does not divide the FFN size {}; pick tp among {}", l.tp, m.ffn(),
           divisors_up_to(m.ffn(), 64));
  TS_CHECK(!l.sp || l.tp > 1, "layout: sp=true splits the sequence over the tensor-parallel group, which needs tp > 1");
  TS_CHECK(!l.sp || m.seq_len % l.tp == 0, "layout: sequence parallelism needs tp={} to divide model.seq_len={}", l.tp, m.seq_len);
  TS_CHECK(m.n_layer % (int64_t{l.pp} * v) == 0,
           "layout: pp={} x v={} = {} model chunks must divide model.n_layer={} (stages hold equal layer counts); pick pp x v "
           "among {}", l.pp, v, l.pp * v, m.n_layer, divisors_up_to(m.n_layer, 1 << 20));
  TS_CHECK(v == 1 || l.pp > 1, "layout: v={} interleaves pipeline stages, which needs pp > 1", v);
  TS_CHECK(v == 1 || l.schedule == config::ScheduleKind::Interleaved,
           "layout: v={} places several model chunks on each stage, which only the interleaved schedule runs (got "
           "schedule={}); use schedule=interleaved, or leave the schedule out",
           v, config::schedule_name(l.schedule));
  check_modeled_schedule(l.schedule);
  TS_CHECK(l.global_batch % (int64_t{l.dp} * l.micro_batch) == 0,
           "layout: global batch {} is not a multiple of dp={} x mb={} = {}; pick a batch that is, or another mb",
           l.global_batch, l.dp, l.micro_batch, int64_t{l.dp} * l.micro_batch);
  TS_CHECK(v == 1 || l.microbatches() % l.pp == 0,
           "layout: the interleaved schedule needs the microbatch count ({} = B / (dp x mb)) to be a multiple of pp={}",
           l.microbatches(), l.pp);
  TS_CHECK(l.zero_stage >= 0 && l.zero_stage <= 3, "layout: zero={} must be a ZeRO stage 0, 1, 2 or 3", l.zero_stage);
  TS_CHECK(l.optimizer != optim::OptimizerKind::OneBitAdam || (l.zero_stage == 0 && l.compression == config::CompressionMethod::None),
           "layout: optimizer=onebit_adam keeps the whole momentum on every data-parallel rank and compresses it "
           "itself; use it with zero=0 and no compression (got zero={}, compression={})", l.zero_stage,
           config::compression_name(l.compression));
  // A parameter the chosen policy ignores is almost always a policy typed wrong, so it is refused
  // rather than silently dropped.
  TS_CHECK(l.recompute_every >= 0, "layout: recompute_every={} must be 0 (ceil(sqrt(layers per chunk))) or a segment "
           "length of at least 1 layer", l.recompute_every);
  TS_CHECK(l.recompute_every == 0 || l.recompute == config::RecomputePolicy::EveryK,
           "layout: recompute_every={} sets the segment length of recompute=every_k, but the layout says recompute={}; "
           "use recompute=every_k or drop recompute_every", l.recompute_every, config::recompute_policy_name(l.recompute));
  TS_CHECK(std::isfinite(l.activation_budget_mb) && l.activation_budget_mb >= 0,
           "layout: activation_budget_mb={} must be a number of MiB, 0 or more", l.activation_budget_mb);
  TS_CHECK(l.activation_budget_mb == 0 || config::recompute_takes_budget(l.recompute),
           "layout: activation_budget_mb={} is the budget of recompute=optimal or dtr, but the layout says recompute={}; "
           "use recompute=optimal or dtr, or drop activation_budget_mb", l.activation_budget_mb,
           config::recompute_policy_name(l.recompute));
  TS_CHECK(!config::recompute_takes_budget(l.recompute) || l.activation_budget_mb > 0,
           "layout: recompute={} needs activation_budget_mb=X, the activation peak in MiB one microbatch may reach on a "
           "rank (the schedule recomputes within it); add activation_budget_mb, or pick another policy",
           config::recompute_policy_name(l.recompute));
  TS_CHECK(std::isfinite(l.bucket_mb) && l.bucket_mb > 0, "layout: bucket_mb={} must be a positive number of MiB "
           "(the runtime's parallel.bucket_mb)", l.bucket_mb);
  TS_CHECK(l.bucket_mb == Layout{}.bucket_mb || l.states == StateAccounting::Engine,
           "layout: bucket_mb={} sizes this engine's gradient buckets, which only states=engine counts; add "
           "states=engine or drop bucket_mb", l.bucket_mb);
  // The rules every user of the layout shares (expert parallelism, for one, which the syntax above
  // does not set); the planner's own checks above come first for their sharper messages.
  l.validate();
}

}  // namespace tessera::plan
