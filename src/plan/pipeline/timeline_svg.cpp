// SVG rendering of a timeline: rows of coloured boxes over a hatched background, so idle time
// (the bubble) stands out, with a time axis and a legend.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.h"
#include "plan/pipeline/timeline.h"

namespace tessera::plan {

namespace {

struct Rgb {
  int r, g, b;
};

Rgb base_colour(BoxKind kind) {
  switch (kind) {
    case BoxKind::Forward: return {0x4e, 0x79, 0xa7};
    case BoxKind::Backward: return {0x59, 0xa1, 0x4f};
    case BoxKind::BackwardInput: return {0x2c, 0x9c, 0x94};
    case BoxKind::BackwardWeight: return {0xb0, 0x7a, 0xa1};
    case BoxKind::Recompute: return {0xed, 0xc9, 0x48};
    case BoxKind::Transfer: return {0x9c, 0x9c, 0x9c};
    case BoxKind::Optimizer: return {0xe1, 0x57, 0x59};
    case BoxKind::Other: return {0xba, 0xb0, 0xac};
  }
  return {0xba, 0xb0, 0xac};
}

const char* kind_name(BoxKind kind) {
  switch (kind) {
    case BoxKind::Forward: return "forward";
    case BoxKind::Backward: return "backward";
    case BoxKind::BackwardInput: return "backward, input gradient (B)";
    case BoxKind::BackwardWeight: return "backward, weight gradient (W)";
    case BoxKind::Recompute: return "recompute";
    case BoxKind::Transfer: return "transfer";
    case BoxKind::Optimizer: return "optimizer step";
    case BoxKind::Other: return "other";
  }
  return "other";
}

// Lighter shades for later model chunks: mix with white.
Rgb shaded(BoxKind kind, int shade) {
  const Rgb c = base_colour(kind);
  const double f = std::min(0.66, 0.22 * std::max(0, shade));
  const auto mix = [&](int x) { return static_cast<int>(std::lround(x + (255 - x) * f)); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

std::string hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

// Dark text on light boxes, white on dark ones.
const char* text_colour(Rgb c) {
  const double luminance = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
  return luminance > 150 ? "#1a1a1a" : "#ffffff";
}

std::string escape(std::string_view text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// A round tick step (1, 2 or 5 times a power of ten) giving at most about 12 ticks.
double tick_step(double end) {
  if (end <= 0) return 1.0;
  const double raw = end / 12.0;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10.0 * power;
}

}  // namespace

std::string render_svg(const Timeline& timeline, const SvgOptions& options) {
  TS_CHECK(options.width >= 200 && options.row_height >= 8, "SVG size too small: width {} row height {}",
           options.width, options.row_height);
  constexpr double kFont = 11.0, kCharWidth = 6.6, kGap = 6.0;
  std::size_t name_chars = 0;
  for (const auto& row : timeline.rows) name_chars = std::max(name_chars, row.name.size());
  const double left = 14.0 + kCharWidth * static_cast<double>(name_chars), right = 16.0;
  const double top = 30.0 + 16.0 * static_cast<double>(timeline.notes.size());
  const double rows_height = static_cast<double>(timeline.rows.size()) * (options.row_height + kGap);
  const double axis_y = top + rows_height;
  const double legend_y = axis_y + 34.0;
  const double height = legend_y + (options.legend ? 22.0 : 0.0);
  const double plot = options.width - left - right;
  const double end = timeline_end(timeline);
  const double scale = end > 0 ? plot / end : 0.0;

  std::string out;
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"{:.0f}\">\n",
      options.width, height, options.width, height, kFont);
  out +=
      "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d0d0d0\" stroke-width=\"2\"/></pattern></defs>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  out += fmt::format("<text x=\"{:.1f}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", left,
                     escape(timeline.title));
  for (std::size_t i = 0; i < timeline.notes.size(); ++i)
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#444444\">{}</text>\n", left,
                       34.0 + 16.0 * static_cast<double>(i), escape(timeline.notes[i]));

  for (std::size_t i = 0; i < timeline.rows.size(); ++i) {
    const auto& row = timeline.rows[i];
    const double y = top + static_cast<double>(i) * (options.row_height + kGap);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
                       left - 6.0, y + options.row_height / 2, escape(row.name));
    out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"url(#idle)\"/>\n",
                       left, y, plot, options.row_height);
    for (const auto& box : row.boxes) {
      TS_CHECK(box.start >= 0 && box.end >= box.start, "timeline box '{}' of row '{}' has start {} and end {}",
               box.label, row.name, box.start, box.end);
      const double x = left + box.start * scale;
      const double w = box.end > box.start ? (box.end - box.start) * scale : 2.0;  // instants: a thin mark
      const Rgb colour = shaded(box.kind, box.shade);
      out += fmt::format("<g><rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
                         "stroke=\"#ffffff\" stroke-width=\"0.8\"/>",
                         x, y, w, options.row_height, hex(colour));
      if (!box.detail.empty()) out += fmt::format("<title>{}</title>", escape(box.detail));
      if (!box.label.empty() && w >= kCharWidth * static_cast<double>(box.label.size()) + 3.0)
        out += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\" dominant-baseline=\"middle\" "
                           "fill=\"{}\">{}</text>",
                           x + w / 2, y + options.row_height / 2, text_colour(colour), escape(box.label));
      out += "</g>\n";
    }
  }

  // Time axis.
  out += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#333333\"/>\n", left,
                     axis_y, left + plot, axis_y);
  const double step = tick_step(end);
  for (int k = 0; end > 0 && k * step <= end * (1 + 1e-9); ++k) {
    const double x = left + k * step * scale;
    out += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#333333\"/>"
                       "<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\" fill=\"#333333\">{:g}</text>\n",
                       x, axis_y, x, axis_y + 4, x, axis_y + 16, k * step);
  }
  if (!timeline.time_unit.empty())
    out += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\" fill=\"#333333\">{}</text>\n", left + plot,
                       axis_y + 30, escape(timeline.time_unit));

  if (options.legend) {
    std::array<bool, 8> present{};
    for (const auto& row : timeline.rows)
      for (const auto& box : row.boxes)
        present[static_cast<std::size_t>(box.kind)] = true;
    double x = left;
    for (std::size_t k = 0; k < present.size(); ++k) {
      if (!present[k]) continue;
      const auto kind = static_cast<BoxKind>(k);
      out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
                         "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                         x, legend_y, hex(base_colour(kind)), x + 16, legend_y + 10, kind_name(kind));
      x += 28.0 + kCharWidth * static_cast<double>(std::string_view(kind_name(kind)).size());
    }
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"url(#idle)\" "
                       "stroke=\"#d0d0d0\"/><text x=\"{:.1f}\" y=\"{:.1f}\">idle (bubble)</text>\n",
                       x, legend_y, x + 16, legend_y + 10);
    if (!timeline.shade_meaning.empty())
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">shade: {} 0 dark, 1, 2, ... lighter</text>\n", x + 28 + 13 * kCharWidth,
                         legend_y + 10, escape(timeline.shade_meaning));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace tessera::plan
