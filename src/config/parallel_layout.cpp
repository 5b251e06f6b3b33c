#include "config/parallel_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>
#include <vector>

#include "core/check.h"

namespace tessera::config {

namespace {

struct KindInfo {
  ScheduleKind kind;
  std::string_view name;
  std::string_view title;
};
constexpr std::array<KindInfo, 5> kKinds{{
    {ScheduleKind::GPipe, "gpipe", "GPipe"},
    {ScheduleKind::OneFOneB, "1f1b", "1F1B (PipeDream-Flush)"},
    {ScheduleKind::Interleaved, "interleaved", "interleaved 1F1B (Megatron PTD-P)"},
    {ScheduleKind::PipeDream2BW, "2bw", "PipeDream-2BW"},
    {ScheduleKind::ZeroBubbleH1, "zb-h1", "zero bubble ZB-H1"},
}};

const KindInfo& info(ScheduleKind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k;
  TS_FAIL("unknown schedule kind {}", static_cast<int>(kind));
}

}  // namespace

std::string_view schedule_name(ScheduleKind kind) { return info(kind).name; }
std::string_view schedule_title(ScheduleKind kind) { return info(kind).title; }

std::string schedule_kind_names() {
  std::string names;
  for (const auto& k : kKinds) names += fmt::format("{}{}", names.empty() ? "" : ", ", k.name);
  return names;
}

std::optional<ScheduleKind> find_schedule_kind(std::string_view name) {
  for (const auto& k : kKinds)
    if (k.name == name) return k.kind;
  return std::nullopt;
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  const std::optional<ScheduleKind> kind = find_schedule_kind(name);
  TS_CHECK(kind.has_value(), "unknown pipeline schedule '{}': choose one of {}", name, schedule_kind_names());
  return *kind;
}

std::string_view mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::DP: return "dp";
    case MeshDim::PP: return "pp";
    case MeshDim::TP: return "tp";
    case MeshDim::EP: return "ep";
    case MeshDim::EDP: return "edp";
  }
  return "unknown";
}

int64_t ParallelLayout::microbatches() const {
  const int64_t per_step = int64_t{dp} * micro_batch;
  return per_step > 0 ? global_batch / per_step : 0;
}

int ParallelLayout::size(MeshDim dim) const {
  switch (dim) {
    case MeshDim::DP: return dp;
    case MeshDim::PP: return pp;
    case MeshDim::TP: return tp;
    case MeshDim::EP: return ep;
    case MeshDim::EDP: return ep > 0 ? dp / ep : 0;
  }
  return 1;
}

std::string ParallelLayout::describe() const {
  return fmt::format(
      "dp {} × pp {} × tp {} (ep {}, sequence parallel {}, ZeRO {}, {} with v {}, global batch {} in microbatches of {})",
      dp, pp, tp, ep, sp ? "on" : "off", zero_stage, schedule_name(schedule), virtual_stages, global_batch,
      micro_batch);
}

namespace {

// The problems both checks share: factors below 1, ep not dividing dp, sp without tp.
std::vector<std::string> factor_problems(const ParallelLayout& l) {
  std::vector<std::string> problems;
  for (auto [name, value] : {std::pair{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}, {"ep", l.ep}}) {
    if (value < 1) problems.push_back(fmt::format("{} is {}, but every factor must be at least 1", name, value));
  }
  if (problems.empty() && l.dp % l.ep != 0) {
    problems.push_back(fmt::format("ep {} does not divide dp {}: expert-parallel groups are made of data-parallel "
                                   "ranks, so dp must be a multiple of ep",
                                   l.ep, l.dp));
  }
  if (l.sp && l.tp <= 1) {
    problems.push_back("sequence parallelism splits the sequence across the tensor-parallel group, so it needs tp > 1 "
                       "(set tp >= 2 or turn sequence parallelism off)");
  }
  return problems;
}

}  // namespace

void ParallelLayout::validate() const {
  std::vector<std::string> problems = factor_problems(*this);
  if (virtual_stages < 1) {
    problems.push_back(fmt::format("virtual_stages (v) is {}, but a pipeline rank holds at least one model chunk; use 1 "
                                   "for no interleaving",
                                   virtual_stages));
  } else if (virtual_stages > 1 && schedule != ScheduleKind::Interleaved) {
    problems.push_back(fmt::format("virtual_stages (v) {} puts several model chunks on each pipeline rank, which only "
                                   "the interleaved schedule runs (the schedule is {}); set the schedule to interleaved "
                                   "or v to 1",
                                   virtual_stages, schedule_name(schedule)));
  }
  if (zero_stage < 0 || zero_stage > 3) {
    problems.push_back(fmt::format("ZeRO stage {} does not exist: use 0 (none), 1 (optimizer state sharded), 2 (and "
                                   "gradients) or 3 (and parameters)",
                                   zero_stage));
  }
  if (micro_batch < 1) {
    problems.push_back(fmt::format("the micro batch is {} sequences; it must be at least 1", micro_batch));
  }
  if (global_batch < 1) {
    problems.push_back(fmt::format("the global batch is {} sequences; it must be at least 1", global_batch));
  }
  const int64_t per_step = int64_t{dp} * micro_batch;
  if (dp >= 1 && micro_batch >= 1 && global_batch >= 1 && global_batch % per_step != 0) {
    // Each data-parallel rank runs whole microbatches, so B must split into dp x b pieces.
    const int64_t below = global_batch / per_step * per_step, above = below + per_step;
    problems.push_back(fmt::format("the global batch {} is not a multiple of dp {} × micro batch {} = {}, so the "
                                   "ranks cannot run whole microbatches; use a global batch of {}{} or another micro "
                                   "batch",
                                   global_batch, dp, micro_batch, per_step,
                                   below > 0 ? fmt::format("{} or ", below) : std::string(), above));
  }
  if (!problems.empty()) TS_FAIL("parallel layout is not valid: {}", fmt::join(problems, "; also "));
}

void ParallelLayout::validate_world(int world) const {
  std::vector<std::string> problems = factor_problems(*this);
  const bool factors_ok = dp >= 1 && pp >= 1 && tp >= 1 && ep >= 1;
  if (factors_ok) {
    // Widened so absurd factors report a product instead of overflowing.
    const long long product = static_cast<long long>(dp) * pp * tp;
    if (product != world) {
      std::string fix;
      if (world % (static_cast<long long>(pp) * tp) == 0) {
        fix = fmt::format("; with pp {} and tp {} use dp {}", pp, tp, world / (static_cast<long long>(pp) * tp));
      } else {
        fix = fmt::format("; choose factors whose product is {}", world);
      }
      // Listed first: a wrong world size is the usual mistake, and the other problems often follow from it.
      problems.insert(problems.begin(),
                      fmt::format("dp {} × pp {} × tp {} = {} ≠ world size {} (ep {} is not a factor: expert "
                                  "groups are carved out of the dp ranks){}",
                                  dp, pp, tp, product, world, ep, fix));
    }
  }
  if (!problems.empty()) {
    TS_FAIL("parallel layout does not fit the world: {}", fmt::join(problems, "; also "));
  }
}

}  // namespace tessera::config
