// Timeline drawings: golden SVG and text grid for small schedules, and the generic box input that
// measured timelines will use.
//
// To accept a deliberate change of the drawings, rerun with TESSERA_UPDATE_GOLDEN=1 and review the
// diff of tests/pipeline/golden/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "schedule/generators.h"
#include "plan/pipeline/closed_form.h"
#include "plan/pipeline/schedule_timeline.h"
#include "plan/pipeline/simulation_report.h"
#include "plan/pipeline/simulator.h"
#include "plan/pipeline/timeline.h"
#include "../schedule/pipeline_test_util.h"

using namespace tessera;
using namespace tessera::pipeline;
using tessera::pipeline::test_util::pipeline_layout;
using namespace tessera::plan;

namespace {

std::string golden_path(const std::string& name) { return std::string(TESSERA_PIPELINE_GOLDEN_DIR) + "/" + name; }

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (std::getenv("TESSERA_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (create it with TESSERA_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "drawing differs from " << path;
}

Timeline simulated(const config::ParallelLayout& layout, double tf, double tb, double tw) {
  const Schedule s = make_schedule(layout);
  const SimulationResult r = simulate_schedule(s, uniform_costs(s, tf, tb, tw));
  Timeline t = schedule_timeline(s, r);
  t.notes.push_back(simulation_caption(r, closed_form_bubble(s, tf, tb, tw)));
  return t;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST(PipelineDrawing, GoldenGridAndSvgForOneFOneB) {
  const Timeline t = simulated(pipeline_layout(ScheduleKind::OneFOneB, 2, 3), 1, 2, 0);
  expect_golden("1f1b_p2_m3.txt", render_grid(t));
  expect_golden("1f1b_p2_m3.svg", render_svg(t));
}

TEST(PipelineDrawing, GoldenGridForInterleavedAndZeroBubble) {
  expect_golden("interleaved_p2_m2_v2.txt",
                render_grid(simulated(pipeline_layout(ScheduleKind::Interleaved, 2, 2, 2), 1, 2, 0)));
  expect_golden("zb-h1_p3_m4.txt", render_grid(simulated(pipeline_layout(ScheduleKind::ZeroBubbleH1, 3, 4), 1, 2, 1)));
}

// The grid's dots are the bubble: 1F1B p = 4, m = 8 with t_f = 1, t_b = 2 leaves each rank idle
// (p - 1)(t_f + t_b) = 9 time units, i.e. 9 cells of 4 characters ("[F0]" is the widest 1-cell box).
TEST(PipelineDrawing, GridDotsAreTheBubble) {
  const std::string grid = render_grid(simulated(pipeline_layout(ScheduleKind::OneFOneB, 4, 8), 1, 2, 0));
  std::istringstream lines(grid);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("rank ", 0) != 0) continue;
    EXPECT_EQ(std::count(line.begin(), line.end(), '.'), 9 * 4) << line;
    EXPECT_EQ(count(line, "[F"), 8u) << line;
    EXPECT_EQ(count(line, "[B"), 8u) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
}

// Measured timelines: arbitrary rows and times, no schedule behind them.
TEST(PipelineDrawing, DrawsGenericTimedBoxes) {
  Timeline t;
  t.title = "measured <run> & co";
  t.time_unit = "ms";
  t.rows.push_back({"gpu 0", {{0.0, 1.1, BoxKind::Forward, 0, "0", "fwd"}, {2.0, 4.1, BoxKind::Backward, 0, "0", ""}}});
  t.rows.push_back({"gpu 1", {{1.0, 2.0, BoxKind::Transfer, 0, "", "p2p"}, {2.0, 3.0, BoxKind::Other, 1, "x", ""}}});
  const std::string svg = render_svg(t);
  EXPECT_NE(svg.find("measured &lt;run&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(count(svg, "<g><rect"), 4u);
  EXPECT_NE(svg.find("<title>p2p</title>"), std::string::npos);
  EXPECT_NE(svg.find(">ms</text>"), std::string::npos);
  EXPECT_NE(svg.find("idle (bubble)"), std::string::npos);

  const std::string grid = render_grid(t, {.cell = 1.0});
  EXPECT_NE(grid.find("gpu 0 [F0a].....[B0a     ]"), std::string::npos) << grid;
  EXPECT_NE(grid.find("gpu 1 .....[C  ][?xb]....."), std::string::npos) << grid;
  EXPECT_NE(grid.find("one cell = 1 (ms)"), std::string::npos) << grid;
}

TEST(PipelineDrawing, WideTimelinesGetCoarserCells) {
  Timeline t;
  t.rows.push_back({"r", {{0.0, 1.0, BoxKind::Forward, 0, "0", ""}, {999.0, 1000.0, BoxKind::Forward, 0, "1", ""}}});
  const std::string grid = render_grid(t, {.cell = 0.0, .max_columns = 100});
  EXPECT_NE(grid.find("one cell = 10"), std::string::npos) << grid;
  EXPECT_LT(grid.size(), 2000u);
}
