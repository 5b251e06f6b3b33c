#include "train/profile_report.h"

#include <fmt/format.h>

#include <vector>

#include "core/atomic_file.h"
#include "parallel/rank_sum.h"

namespace tessera::train {

namespace {
constexpr int64_t kFirstProfiled = 2, kLastProfiled = 4;

// Every rank's `text`, in rank order, on every rank.
std::vector<std::string> gather_text(dist::Communicator* world, const std::string& text) {
  if (world == nullptr || world->size() == 1) return {text};
  const auto ranks = static_cast<size_t>(world->size());
  std::vector<double> mine(ranks, 0.0);
  mine[static_cast<size_t>(world->rank())] = static_cast<double>(text.size());
  const std::vector<double> sizes = parallel::sum_over_ranks(world, mine);
  std::vector<size_t> counts(ranks);
  size_t total = 0;
  for (size_t r = 0; r < ranks; ++r) total += counts[r] = static_cast<size_t>(sizes[r]);
  std::string all(total, '\0');
  world->all_gather(text.data(), all.data(), counts, DType::U8)->wait();
  std::vector<std::string> texts;
  size_t at = 0;
  for (size_t r = 0; r < ranks; ++r) {
    texts.push_back(all.substr(at, counts[r]));
    at += counts[r];
  }
  return texts;
}
}  // namespace

bool profiles_step(int64_t nth, int64_t planned) {
  if (planned == 1) return nth == 1;
  return nth >= kFirstProfiled && nth <= kLastProfiled;
}

std::string profile_window(int64_t first, int64_t last) {
  if (first < 0) return "no step";
  return first == last ? fmt::format("step {}", first) : fmt::format("steps {}-{}", first, last);
}

RunProfile::RunProfile(bool enabled, int64_t first_step, int64_t steps) : first_step_(first_step), steps_(steps) {
  if (enabled) profiler_.emplace();
}

bool RunProfile::profiles(int64_t step) const {
  return profiler_.has_value() && profiles_step(step - first_step_, steps_ - first_step_);
}

Profiler* RunProfile::begin(int64_t step) {
  if (!profiles(step)) return nullptr;
  profiler_->begin_step(step);
  installed_.emplace(&*profiler_);
  if (profiled_first_ < 0) profiled_first_ = step;
  profiled_last_ = step;
  return &*profiler_;
}

void RunProfile::end() {
  if (!installed_) return;
  installed_.reset();
  profiler_->end_step();
}

std::string RunProfile::finish(dist::Communicator* world, const ProfileFiles& files) const {
  const std::string window = profile_window(profiled_first_, profiled_last_);
  const Profiler& profiler = *profiler_;
  const int rank = world != nullptr ? world->rank() : 0;
  const std::string title = fmt::format("profile of rank {}, {} (ms per step by category; self time, so the rows "
                                        "add up to the step)", rank, window);
  const std::vector<std::string> tables = gather_text(world, profiler.table(title));
  const std::vector<std::string> traces = gather_text(world, profiler.trace_events_json(rank, fmt::format("rank {}", rank)));
  if (rank != 0) return "";
  std::string text;
  for (const std::string& t : tables) text += t;
  write_file_atomically(files.profile_path, text);
  std::string trace = R"({"displayTimeUnit":"ms","otherData":{"window":")" + window + R"("},"traceEvents":[)";
  for (size_t r = 0; r < traces.size(); ++r) {
    if (r > 0) trace += ',';
    trace += traces[r];
  }
  trace += "]}\n";
  write_file_atomically(files.trace_path, trace);
  return fmt::format("{}{}written to {}; the trace (open it in https://ui.perfetto.dev) in {}\n", tables.front(),
                     tables.size() > 1 ? "every rank's table is " : "the table is ", files.profile_path,
                     files.trace_path);
}

}  // namespace tessera::train
