#include "core/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace tessera {

namespace {
// See current_profiler() in the header for why this is a thread-local.
thread_local Profiler* g_current_profiler = nullptr;
}  // namespace

Profiler* current_profiler() { return g_current_profiler; }

ProfilerInstall::ProfilerInstall(Profiler* profiler) : previous_(g_current_profiler) { g_current_profiler = profiler; }
ProfilerInstall::~ProfilerInstall() { g_current_profiler = previous_; }

const char* profile_category_name(ProfileCategory category) {
  switch (category) {
    case ProfileCategory::Gemm: return "gemm";
    case ProfileCategory::Attention: return "attention";
    case ProfileCategory::Norm: return "norm";
    case ProfileCategory::Elementwise: return "elementwise";
    case ProfileCategory::Cast: return "cast";
    case ProfileCategory::Embedding: return "embedding";
    case ProfileCategory::Loss: return "loss";
    case ProfileCategory::Communication: return "communication";
    case ProfileCategory::Optimizer: return "optimizer";
    case ProfileCategory::Other: return "other";
  }
  return "other";
}

void Profiler::begin_step(int64_t step) {
  TS_CHECK(!recording_, "profiler: step {} begins before step {} ended", step, current_step_);
  recording_ = true;
  current_step_ = step;
  step_start_us_ = now_us();
  stack_.clear();
}

void Profiler::end_step() {
  TS_CHECK(recording_, "profiler: a step ends that did not begin");
  TS_CHECK(stack_.empty(), "profiler: step {} ends with {} scope(s) still open", current_step_, stack_.size());
  const double end = now_us();
  recording_ = false;
  ++step_count_;
  step_total_us_ += end - step_start_us_;
  events_.push_back({"step", ProfileCategory::Other, step_start_us_, end - step_start_us_, -1, -1,
                     static_cast<int>(current_step_), true});
}

void Profiler::open() { stack_.push_back(Open{}); }

void Profiler::close(const char* name, ProfileCategory category, double start_us, double end_us, int unit,
                     int microbatch) {
  if (stack_.empty()) return;  // opened in a step that has ended: end_step refused that already
  const double duration = end_us - start_us;
  const double self = std::max(0.0, duration - stack_.back().child_us);
  stack_.pop_back();
  if (!stack_.empty()) stack_.back().child_us += duration;
  self_us_[static_cast<size_t>(category)] += self;
  events_.push_back({name, category, start_us, duration, unit, microbatch, static_cast<int>(current_step_), false});
}

double Profiler::step_ms() const { return step_count_ > 0 ? step_total_us_ / 1e3 / static_cast<double>(step_count_) : 0; }

std::array<double, kProfileCategoryCount> Profiler::category_ms() const {
  std::array<double, kProfileCategoryCount> ms{};
  if (step_count_ == 0) return ms;
  double claimed = 0;
  for (size_t c = 0; c < kProfileCategoryCount; ++c) {
    if (c == static_cast<size_t>(ProfileCategory::Other)) continue;
    ms[c] = self_us_[c] / 1e3 / static_cast<double>(step_count_);
    claimed += ms[c];
  }
  // Other: the phases' own time and everything outside any scope, so the rows add up to the step.
  ms[static_cast<size_t>(ProfileCategory::Other)] = std::max(0.0, step_ms() - claimed);
  return ms;
}

std::string Profiler::table(const std::string& title) const {
  std::string out = fmt::format("{}\n", title);
  if (step_count_ == 0) return out + "  no step was profiled\n";
  const double step = step_ms();
  const std::array<double, kProfileCategoryCount> ms = category_ms();
  out += fmt::format("  {:<14} {:>12} {:>8}\n", "category", "ms/step", "share");
  for (size_t c = 0; c < kProfileCategoryCount; ++c) {
    out += fmt::format("  {:<14} {:>12.3f} {:>7.1f}%\n", profile_category_name(static_cast<ProfileCategory>(c)), ms[c],
                       step > 0 ? 100.0 * ms[c] / step : 0.0);
  }
  out += fmt::format("  {:<14} {:>12.3f} {:>7.1f}%  (mean of {} step{})\n", "step", step, 100.0, step_count_,
                     step_count_ == 1 ? "" : "s");
  return out;
}

std::string Profiler::trace_events_json(int rank, const std::string& process_name) const {
  std::string out = nlohmann::json{{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                                   {"args", {{"name", process_name}}}}.dump();
  out += ',';
  out += nlohmann::json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                        {"args", {{"sort_index", rank}}}}.dump();
  out += ',';
  out += nlohmann::json{{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                        {"args", {{"name", "step"}}}}.dump();
  for (const Event& e : events_) {
    nlohmann::json args = {{"step", e.step}};
    if (e.unit >= 0) args["unit"] = e.unit;
    if (e.microbatch >= 0) args["microbatch"] = e.microbatch;
    const nlohmann::json event = {{"name", e.name},
                                  {"cat", e.is_step ? "step" : profile_category_name(e.category)},
                                  {"ph", "X"},
                                  {"ts", e.start_us},
                                  {"dur", e.duration_us},
                                  {"pid", rank},
                                  {"tid", 0},
                                  {"args", std::move(args)}};
    out += ',';
    out += event.dump();
  }
  return out;
}

}  // namespace tessera
