#include "plan/pipeline/measured_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/check.h"
#include "plan/pipeline/schedule_timeline.h"

namespace tessera::plan {

using pipeline::MeasuredInstruction;
using pipeline::Op;

namespace {

constexpr double kMilliseconds = 1000.0;

// Compute that the bubble counts as busy: everything but transfers and the optimizer step.
bool counts_as_busy(Op op) { return pipeline::is_compute(op) && op != Op::OptimizerStep; }

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

}  // namespace

MeasuredBubble measured_bubble(const pipeline::MeasuredTimeline& timeline) {
  MeasuredBubble b;
  const size_t ranks = timeline.records.size();
  b.busy.assign(ranks, 0.0);
  b.bubble_per_rank.assign(ranks, 0.0);
  for (size_t r = 0; r < ranks; ++r) {
    for (const MeasuredInstruction& m : timeline.records[r]) {
      if (!counts_as_busy(m.op)) continue;
      b.busy[r] += m.end - m.start;
      b.total = std::max(b.total, m.end);
    }
  }
  double sum = 0;
  for (size_t r = 0; r < ranks; ++r) {
    b.bubble_per_rank[r] = b.total > 0 ? (b.total - b.busy[r]) / b.total : 0.0;
    sum += b.bubble_per_rank[r];
  }
  b.fraction = ranks > 0 ? sum / static_cast<double>(ranks) : 0.0;
  return b;
}

MeasuredCosts measured_costs(const pipeline::MeasuredTimeline& timeline, const pipeline::Schedule& schedule) {
  const auto stages = static_cast<size_t>(schedule.stages());
  std::vector<std::vector<double>> forward(stages), backward(stages), input(stages), weight(stages);
  // The send of each tensor, by (tensor, edge, microbatch), to pair with its receive.
  std::map<std::tuple<int, int, int>, const MeasuredInstruction*> sends;
  for (const std::vector<MeasuredInstruction>& records : timeline.records) {
    for (const MeasuredInstruction& m : records) {
      TS_CHECK(m.stage >= 0 && static_cast<size_t>(m.stage) < stages, "a record names stage {} of {}", m.stage, stages);
      const double seconds = m.end - m.start;
      const auto s = static_cast<size_t>(m.stage);
      switch (m.op) {
        case Op::Forward: forward[s].push_back(seconds); break;
        case Op::Backward: backward[s].push_back(seconds); break;
        case Op::BackwardInput: input[s].push_back(seconds); break;
        case Op::BackwardWeight: weight[s].push_back(seconds); break;
        case Op::Send:
          sends[{static_cast<int>(m.tensor), pipeline::transfer_edge(pipeline::instruction_of(m)), m.microbatch}] = &m;
          break;
        default: break;
      }
    }
  }
  MeasuredCosts c;
  c.costs = uniform_costs(schedule, 0.0, 0.0, 0.0);
  for (size_t s = 0; s < stages; ++s) {
    c.costs.forward[s] = median(forward[s]);
    c.costs.recompute[s] = c.costs.forward[s];
    if (schedule.split_backward) {
      c.costs.weight[s] = median(weight[s]);
      c.costs.backward[s] = median(input[s]) + c.costs.weight[s];
    } else {
      c.costs.backward[s] = median(backward[s]);
      c.costs.weight[s] = 0.0;
    }
  }
  std::vector<double> exposed;
  for (const std::vector<MeasuredInstruction>& records : timeline.records) {
    for (const MeasuredInstruction& m : records) {
      if (m.op != Op::Recv) continue;
      ++c.transfers;
      const auto found =
          sends.find({static_cast<int>(m.tensor), pipeline::transfer_edge(pipeline::instruction_of(m)), m.microbatch});
      TS_CHECK(found != sends.end(), "the timeline has no send for '{}'", pipeline::describe(pipeline::instruction_of(m)));
      const MeasuredInstruction& send = *found->second;
      if (m.start <= send.start) exposed.push_back(std::max(0.0, m.end - send.start));
    }
  }
  c.exposed_transfers = static_cast<int>(exposed.size());
  c.costs.p2p = median(exposed);
  c.costs.mode = TransferMode::Async;
  return c;
}

MeasuredComparison compare_with_simulation(const pipeline::MeasuredTimeline& timeline) {
  MeasuredComparison c;
  c.schedule = pipeline::schedule_of(timeline);
  pipeline::check_follows(timeline, c.schedule);
  c.measured = measured_bubble(timeline);
  c.costs = measured_costs(timeline, c.schedule);
  c.simulated = simulate_schedule(c.schedule, c.costs.costs);
  return c;
}

Timeline comparison_timeline(const pipeline::MeasuredTimeline& timeline, const MeasuredComparison& comparison) {
  const TimeAxis axis{kMilliseconds, "ms"};
  Timeline t = schedule_timeline(comparison.schedule, comparison.simulated, axis);
  t.title = fmt::format("measured and simulated: {}", t.title);
  t.notes.push_back(fmt::format("measured: bubble {:.2f} %, compute ends at {:.2f} ms; simulated with the measured "
                                "costs: bubble {:.2f} %, {:.2f} ms", 100.0 * comparison.measured.fraction,
                                comparison.measured.total * kMilliseconds, 100.0 * comparison.simulated.bubble_fraction,
                                comparison.simulated.total_time * kMilliseconds));
  std::vector<TimelineRow> simulated = std::move(t.rows);
  t.rows.clear();
  for (size_t r = 0; r < timeline.records.size(); ++r) {
    TimelineRow row;
    row.name = fmt::format("measured, rank {}", r);
    for (const MeasuredInstruction& m : timeline.records[r]) {
      if (pipeline::is_transfer(m.op)) continue;  // waiting for data is idle time
      if (m.op == Op::OptimizerStep && m.end <= m.start) continue;  // a step merged into the one before
      TimedBox box;
      box.start = m.start * kMilliseconds;
      box.end = m.end * kMilliseconds;
      box.kind = box_kind(m.op);
      box.shade = m.chunk;
      if (m.op != Op::OptimizerStep) box.label = fmt::format("{}", m.microbatch);
      box.detail = fmt::format("{} [{:.3f}, {:.3f}] ms", pipeline::describe(pipeline::instruction_of(m)), box.start,
                               box.end);
      row.boxes.push_back(std::move(box));
    }
    t.rows.push_back(std::move(row));
  }
  for (TimelineRow& row : simulated) {
    row.name = "simulated, " + row.name;
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::string comparison_report(const MeasuredComparison& c) {
  const pipeline::Schedule& s = c.schedule;
  std::string out;
  std::string shape = fmt::format("p = {}, m = {}", s.ranks, s.microbatches);
  if (s.chunks > 1) shape += fmt::format(", v = {}", s.chunks);
  out += fmt::format("{:<12} {} ({}), measured\n", "schedule", pipeline::schedule_title(s.kind), shape);
  out += fmt::format("\nper-stage costs, medians of the measured instructions (ms):\n{:>5}  {:>9}  {:>9}  {:>9}\n",
                     "stage", "forward", "backward", "weight");
  for (size_t st = 0; st < c.costs.costs.forward.size(); ++st) {
    out += fmt::format("{:>5}  {:>9.3f}  {:>9.3f}  {:>9}\n", st, c.costs.costs.forward[st] * kMilliseconds,
                       c.costs.costs.backward[st] * kMilliseconds,
                       s.split_backward ? fmt::format("{:.3f}", c.costs.costs.weight[st] * kMilliseconds) : "-");
  }
  out += fmt::format("p2p {:.3f} ms: median of {} exposed transfers of {} (the rest arrived before they were "
                     "awaited)\n\n",
                     c.costs.costs.p2p * kMilliseconds, c.costs.exposed_transfers, c.costs.transfers);
  const double measured = c.measured.fraction, simulated = c.simulated.bubble_fraction;
  out += fmt::format("{:<12} measured {:.4f}, simulated {:.4f}", "bubble", measured, simulated);
  if (simulated > 0) out += fmt::format(" (measured / simulated − 1 = {:+.1f} %)", 100.0 * (measured / simulated - 1));
  out += "\n";
  out += fmt::format("{:<12} measured {:.3f} ms, simulated {:.3f} ms (to the end of the last compute instruction)\n",
                     "total time", c.measured.total * kMilliseconds, c.simulated.total_time * kMilliseconds);
  out += fmt::format("\n{:>4}  {:>12}  {:>12}  {:>16}  {:>17}\n", "rank", "busy ms", "idle ms", "bubble measured",
                     "bubble simulated");
  for (size_t r = 0; r < c.measured.busy.size(); ++r) {
    out += fmt::format("{:>4}  {:>12.3f}  {:>12.3f}  {:>16.4f}  {:>17.4f}\n", r, c.measured.busy[r] * kMilliseconds,
                       (c.measured.total - c.measured.busy[r]) * kMilliseconds, c.measured.bubble_per_rank[r],
                       c.simulated.bubble_per_rank[r]);
  }
  return out;
}

}  // namespace tessera::plan
