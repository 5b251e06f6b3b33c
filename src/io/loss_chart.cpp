#include "io/loss_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>


namespace tessera::io {

namespace {

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over span.
double tick_step(double span, int count) {
  double raw = span / std::max(count, 1);
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double frac = raw / power;
  double nice = frac < 1.5 ? 1 : frac < 3 ? 2 : frac < 7 ? 5 : 10;
  return nice * power;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

}  // namespace

std::string render_chart_svg(const ChartSpec& spec) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : spec.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  }
  if (!spec.reference_label.empty()) {
    y0 = std::min(y0, spec.reference_y);
    y1 = std::max(y1, spec.reference_y);
  }
  if (!std::isfinite(x0)) {  // nothing to draw yet
    x0 = 0;
    x1 = 1;
    y0 = 0;
    y1 = 1;
  }
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) y1 = y0 + 1;
  const double ypad = 0.05 * (y1 - y0);
  y0 -= ypad;
  y1 += ypad;

  const int W = spec.width, H = spec.height;
  const double left = 64, right = 20, top = 40, bottom = 48;
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1.0 - (y - y0) / (y1 - y0)) * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      W, H);
  svg += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", left,
                     escape(spec.title));
  // Grid and ticks.
  const double ys = tick_step(y1 - y0, 6), xs = tick_step(x1 - x0, 8);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys) {
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", left,
                       py(y), left + pw, py(y));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", left - 6, py(y) + 4,
                       std::round(y / ys) * ys);
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", px(x),
                       top, px(x), top + ph);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", px(x), top + ph + 16,
                       std::round(x / xs) * xs);
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
                     pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, H - 10,
                     escape(spec.x_label));
  svg += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     top + ph / 2, escape(spec.y_label));
  if (!spec.reference_label.empty()) {
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n", left,
        py(spec.reference_y), left + pw, py(spec.reference_y));
  }
  // Series.
  for (const auto& s : spec.series) {
    std::string points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
      if (s.markers) {
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(s.x[i]), py(s.y[i]), s.color);
      }
    }
    if (!points.empty()) {
      svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", s.color, points);
    }
  }
  // Legend.
  double ly = top + 14;
  auto legend = [&](const std::string& label, const std::string& color, bool dashed) {
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                       left + pw - 170, ly - 4, left + pw - 150, ly - 4, color,
                       dashed ? " stroke-dasharray=\"6 4\"" : "");
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", left + pw - 145, ly, escape(label));
    ly += 16;
  };
  for (const auto& s : spec.series) legend(s.label, s.color, false);
  if (!spec.reference_label.empty()) legend(spec.reference_label, "#888", true);
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera::io
