#pragma once
// A loss chart as a standalone SVG: training loss and validation loss
// against the step, with axes, ticks, a legend and an optional horizontal reference line (the
// unigram baseline). Write it with write_file_atomically (core/atomic_file.h) so a browser
// reloading it never sees half a file.
#include <string>
#include <vector>

namespace tessera::io {

struct Series {
  std::string label;
  std::string color;  // CSS color
  std::vector<double> x, y;
  bool markers = false;
};

struct ChartSpec {
  std::string title;
  std::string x_label = "step";
  std::string y_label = "loss (nats)";
  std::vector<Series> series;
  double reference_y = 0.0;  // drawn dashed when reference_label is set
  std::string reference_label;
  int width = 720, height = 420;
};

std::string render_chart_svg(const ChartSpec& spec);

}  // namespace tessera::io
