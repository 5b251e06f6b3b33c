#pragma once
// Timelines as pictures: one row per rank (or per any worker), each a list of timed boxes.
//
// The drawing knows nothing about schedules or the simulator: it takes generic boxes, so the same
// code draws a simulated schedule and a timeline measured in a real run. Space without a box is
// idle time (the pipeline bubble) and is drawn hatched in SVG and as dots in the text grid. A box
// with end == start is an instant (an optimizer step that takes no modelled time): a thin mark in
// SVG, left out of the grid.
#include <string>
#include <vector>

namespace tessera::plan {

enum class BoxKind { Forward, Backward, BackwardInput, BackwardWeight, Recompute, Transfer, Optimizer, Other };

struct TimedBox {
  double start = 0.0;
  double end = 0.0;
  BoxKind kind = BoxKind::Other;
  int shade = 0;       // 0, 1, 2, ...: lighter variants of the kind's colour (model chunk)
  std::string label;   // short text inside the box, e.g. the microbatch number
  std::string detail;  // longer description (SVG tooltip)
};

struct TimelineRow {
  std::string name;  // "rank 0"
  std::vector<TimedBox> boxes;
};

struct Timeline {
  std::string title;
  std::vector<std::string> notes;  // lines printed under the title ("bubble 27.3 %")
  std::vector<TimelineRow> rows;
  std::string time_unit;      // axis caption, e.g. "time units" or "ms"
  std::string shade_meaning;  // what the shade number stands for, e.g. "model chunk"; empty: unused
};

double timeline_end(const Timeline& timeline);  // latest box end, 0 when empty

struct SvgOptions {
  double width = 960.0;       // pixels of the whole picture
  double row_height = 26.0;   // pixels per row
  bool legend = true;
};

// A standalone SVG document. Deterministic text for the same input (used by golden tests).
std::string render_svg(const Timeline& timeline, const SvgOptions& options = {});

struct GridOptions {
  double cell = 0.0;          // time per character cell; 0 picks the shortest box
  int max_columns = 400;      // coarser cells when the timeline would be wider than this
};

// Plain text for terminals: one line per row, each box printed as [F3] spanning its cells, idle
// cells as dots. Letters: F forward, B backward, b backward-input, W weight gradient, R recompute,
// C transfer, O optimizer, ? other; with shades, a letter for the shade follows the label (3a, 3b).
std::string render_grid(const Timeline& timeline, const GridOptions& options = {});

}  // namespace tessera::plan
