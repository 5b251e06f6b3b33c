// `tessera simulate`: generate a pipeline schedule, validate it, simulate it with uniform costs,
// print the bubble next to its closed form, and optionally draw the timeline. With --timeline, the
// schedule and its costs come from a step measured in a run (timeline.json): it is drawn above its
// simulation with the measured costs, and both bubbles are printed.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "config/parallel_layout.h"
#include "core/check.h"
#include "schedule/generators.h"
#include "schedule/validator.h"
#include "schedule/measured_timeline.h"
#include "plan/pipeline/closed_form.h"
#include "plan/pipeline/measured_run.h"
#include "plan/pipeline/schedule_timeline.h"
#include "plan/pipeline/simulation_report.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"

namespace tessera::cli {

namespace {

struct SimulateOptions {
  std::string schedule{config::schedule_name(config::ScheduleKind::OneFOneB)};
  int stages = 4;
  int microbatches = 8;
  int chunks = 1;
  int steps = 1;
  std::string weight_version = "newest";
  double forward = 1.0;
  double backward = 2.0;
  double weight = 1.0;
  double p2p = 0.0;
  bool recompute = false;
  bool blocking = false;
  std::string svg;
  bool grid = false;
  std::string timeline;  // a measured timeline.json: replaces the schedule and cost options
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  TS_CHECK(out.good(), "cannot write '{}': {}", path, std::strerror(errno));
  out << text;
  out.close();
  TS_CHECK(!out.fail(), "writing '{}' failed: {}", path, std::strerror(errno));
}

// The options in their own words, before the schedule generator and the simulator check the
// same values in theirs (stage counts, "forward[0]").
void check_options(const SimulateOptions& o) {
  const auto at_least_one = [](const char* option, int value, const char* meaning) {
    TS_CHECK(value >= 1, "simulate: {} must be at least 1 ({}), got {}", option, meaning, value);
  };
  at_least_one("--stages", o.stages, "pipeline stages");
  at_least_one("--microbatches", o.microbatches, "microbatches per optimizer step");
  at_least_one("--chunks", o.chunks, "model chunks per rank; 1 unless --schedule interleaved");
  at_least_one("--steps", o.steps, "optimizer steps in the list");
  const auto time = [](const char* option, double value, bool positive) {
    TS_CHECK(std::isfinite(value) && (positive ? value > 0 : value >= 0),
             "simulate: {} must be a finite number {}, got {}", option, positive ? "above 0" : "of 0 or more", value);
  };
  time("--forward-time", o.forward, true);
  time("--backward-time", o.backward, true);
  time("--weight-time", o.weight, false);
  time("--p2p-time", o.p2p, false);
  TS_CHECK(o.weight <= o.backward,
           "simulate: --weight-time {} is more than --backward-time {}; the weight gradient is a share of the whole "
           "backward time",
           o.weight, o.backward);
}

void run(const SimulateOptions& o) {
  namespace pp = tessera::pipeline;
  check_options(o);
  // One data-parallel replica running m microbatches of one sequence: the simulator times a
  // pipeline, which dp, tp and the microbatch size do not reorder.
  config::ParallelLayout layout;
  layout.pp = o.stages;
  layout.virtual_stages = o.chunks;
  layout.schedule = config::parse_schedule_kind(o.schedule);
  layout.global_batch = o.microbatches;
  const pp::Schedule schedule = pp::make_schedule(
      layout, {.steps = o.steps,
               .recompute = o.recompute,
               .two_bw_versions = pp::parse_two_bw_versions(o.weight_version)});
  const pp::ValidationReport validation = pp::check_valid(schedule);
  plan::PipelineCosts costs = plan::uniform_costs(schedule, o.forward, o.backward, o.weight, o.p2p);
  costs.mode = o.blocking ? plan::TransferMode::Blocking : plan::TransferMode::Async;
  const plan::SimulationResult result = plan::simulate_schedule(schedule, costs);
  const auto closed_form = plan::closed_form_bubble(schedule, o.forward, o.backward, o.weight);
  fmt::print("{}", plan::simulation_report(schedule, validation, result, closed_form));
  if (o.p2p > 0 || o.recompute)
    fmt::print("note: the closed forms assume no point-to-point time and no recompute\n");
  if (!o.svg.empty() || o.grid) {
    plan::Timeline timeline = plan::schedule_timeline(schedule, result);
    timeline.notes.push_back(plan::simulation_caption(result, closed_form));
    if (o.grid) fmt::print("\n{}", plan::render_grid(timeline));
    if (!o.svg.empty()) {
      write_file(o.svg, plan::render_svg(timeline));
      fmt::print("\nwrote {}\n", o.svg);
    }
  }
}

// A measured step beside its simulation; the picture goes next to the timeline unless --svg says where.
void run_measured(const SimulateOptions& o) {
  const pipeline::MeasuredTimeline timeline = pipeline::read_measured_timeline(o.timeline);
  const plan::MeasuredComparison comparison = plan::compare_with_simulation(timeline);
  fmt::print("{}", plan::comparison_report(comparison));
  const plan::Timeline picture = plan::comparison_timeline(timeline, comparison);
  if (o.grid) fmt::print("\n{}", plan::render_grid(picture));
  const std::string svg =
      o.svg.empty() ? std::filesystem::path(o.timeline).replace_extension(".svg").string() : o.svg;
  write_file(svg, plan::render_svg(picture));
  fmt::print("\nwrote {}\n", svg);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Generate a pipeline schedule, check it for deadlocks, and simulate its timeline and bubble");
  cmd->add_option("--schedule", options->schedule, "gpipe, 1f1b, interleaved, 2bw or zb-h1")
      ->capture_default_str();
  cmd->add_option("--stages,-p", options->stages, "pipeline stages p (one rank each)")->capture_default_str();
  cmd->add_option("--microbatches,-m", options->microbatches, "microbatches per optimizer step m")
      ->capture_default_str();
  cmd->add_option("--chunks", options->chunks, "model chunks per rank v (interleaved)")->capture_default_str();
  cmd->add_option("--steps", options->steps, "optimizer steps in one list (2bw)")->capture_default_str();
  cmd->add_option("--weight-version", options->weight_version,
                  "2bw: the weights a microbatch reads, as parallel.weight_version (newest or delayed)")
      ->check(CLI::IsMember({"newest", "delayed"}))
      ->capture_default_str();
  cmd->add_option("--forward-time", options->forward, "forward time of one microbatch on one rank")
      ->capture_default_str();
  cmd->add_option("--backward-time", options->backward,
                  "whole backward time (input gradient + weight gradient) of one microbatch on one rank")
      ->capture_default_str();
  cmd->add_option("--weight-time", options->weight,
                  "weight-gradient share of --backward-time (run separately by zb-h1)")
      ->capture_default_str();
  cmd->add_option("--p2p-time", options->p2p, "time of one point-to-point transfer")->capture_default_str();
  cmd->add_flag("--recompute", options->recompute, "recompute each forward just before its backward");
  cmd->add_flag("--blocking", options->blocking,
                "simulate blocking send/recv (default: isend/irecv, the consumer waits for the data)");
  cmd->add_option("--svg", options->svg, "write the timeline picture to this SVG file");
  cmd->add_flag("--grid", options->grid, "print the timeline as a text grid");
  CLI::Option* timeline = cmd->add_option(
      "--timeline", options->timeline,
      "a step measured in a run (timeline.json, log.timeline = true): draw it beside its simulation with the "
      "measured costs (SVG next to it unless --svg), print both bubbles");
  for (const char* name : {"--schedule", "--stages", "--microbatches", "--chunks", "--steps", "--weight-version", "--forward-time",
                           "--backward-time", "--weight-time", "--p2p-time", "--recompute", "--blocking"}) {
    timeline->excludes(cmd->get_option(name));
  }
  cmd->callback([options] { options->timeline.empty() ? run(*options) : run_measured(*options); });
}

}  // namespace tessera::cli
