#include "plan/pipeline/simulation_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tessera::plan {

std::string simulation_caption(const SimulationResult& result, const std::optional<ClosedFormBubble>& closed_form) {
  std::string text = fmt::format("bubble {:.2f} %", 100.0 * result.bubble_fraction);
  if (closed_form) text += fmt::format(" (closed form {:.2f} %)", 100.0 * closed_form->fraction);
  const double peak =
      result.peak_activation.empty() ? 0.0 : *std::max_element(result.peak_activation.begin(), result.peak_activation.end());
  text += fmt::format(", total time {:g}, peak activations {:g} microbatches (busiest rank)", result.total_time, peak);
  return text;
}

std::string simulation_report(const pipeline::Schedule& schedule, const pipeline::ValidationReport& validation,
                              const SimulationResult& result, const std::optional<ClosedFormBubble>& closed_form) {
  std::string out;
  std::string shape = fmt::format("p = {}, m = {}", schedule.ranks, schedule.microbatches);
  if (schedule.chunks > 1) shape += fmt::format(", v = {}", schedule.chunks);
  if (schedule.steps > 1) shape += fmt::format(", {} steps", schedule.steps);
  out += fmt::format("{:<12} {} ({})\n", "schedule", pipeline::schedule_title(schedule.kind), shape);
  out += fmt::format("{:<12} {}\n", "validation", validation.summary());
  out += fmt::format("{:<12} {:g}\n", "total time", result.total_time);
  std::string bubble = fmt::format("{:.4f} simulated", result.bubble_fraction);
  if (closed_form)
    bubble += fmt::format(", {:.4f} closed form {}", closed_form->fraction, closed_form->formula);
  else
    bubble += ", no closed form for this case";
  out += fmt::format("{:<12} {}\n", "bubble", bubble);
  out += fmt::format("\n{:>4}  {:>10}  {:>10}  {:>7}  {:>14}  {:>15}\n", "rank", "busy", "idle", "bubble",
                     "peak in-flight", "peak activation");
  for (std::size_t r = 0; r < result.busy.size(); ++r)
    out += fmt::format("{:>4}  {:>10.4g}  {:>10.4g}  {:>7.4f}  {:>14}  {:>15.4g}\n", r, result.busy[r],
                       result.total_time - result.busy[r], result.bubble_per_rank[r], result.peak_alive[r],
                       result.peak_activation[r]);
  out += "\npeak in-flight: (microbatch, chunk) pairs whose activations a rank holds at once;\n"
         "peak activation: the same in units of one microbatch's activations of a whole rank (a chunk is 1/v).\n";
  return out;
}

}  // namespace tessera::plan
