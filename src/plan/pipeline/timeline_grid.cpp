// Text rendering of a timeline, for terminals and for diffs in tests.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "plan/pipeline/timeline.h"

namespace tessera::plan {

double timeline_end(const Timeline& timeline) {
  double end = 0.0;
  for (const auto& row : timeline.rows)
    for (const auto& box : row.boxes) end = std::max(end, box.end);
  return end;
}

namespace {

char kind_letter(BoxKind kind) {
  switch (kind) {
    case BoxKind::Forward: return 'F';
    case BoxKind::Backward: return 'B';
    case BoxKind::BackwardInput: return 'b';
    case BoxKind::BackwardWeight: return 'W';
    case BoxKind::Recompute: return 'R';
    case BoxKind::Transfer: return 'C';
    case BoxKind::Optimizer: return 'O';
    case BoxKind::Other: return '?';
  }
  return '?';
}

const char* kind_word(BoxKind kind) {
  switch (kind) {
    case BoxKind::Forward: return "forward";
    case BoxKind::Backward: return "backward";
    case BoxKind::BackwardInput: return "backward-input";
    case BoxKind::BackwardWeight: return "weight-gradient";
    case BoxKind::Recompute: return "recompute";
    case BoxKind::Transfer: return "transfer";
    case BoxKind::Optimizer: return "optimizer";
    case BoxKind::Other: return "other";
  }
  return "other";
}

struct Placed {
  long long first = 0, last = 0;  // cells [first, last)
  std::string text;
};

}  // namespace

std::string render_grid(const Timeline& timeline, const GridOptions& options) {
  TS_CHECK(options.cell >= 0 && std::isfinite(options.cell), "grid cell time {} must be >= 0", options.cell);
  TS_CHECK(options.max_columns >= 1, "grid max_columns {} must be >= 1", options.max_columns);
  const double end = timeline_end(timeline);
  bool shaded = false;
  double shortest = std::numeric_limits<double>::infinity();
  for (const auto& row : timeline.rows)
    for (const auto& box : row.boxes) {
      TS_CHECK(box.start >= 0 && box.end >= box.start, "timeline box '{}' of row '{}' has start {} and end {}",
               box.label, row.name, box.start, box.end);
      if (box.end <= box.start) continue;  // instants are not drawn in the grid
      shortest = std::min(shortest, box.end - box.start);
      shaded |= box.shade > 0;
    }
  double cell = options.cell > 0 ? options.cell : (std::isfinite(shortest) ? shortest : 1.0);
  if (end / cell > options.max_columns) cell = end / options.max_columns;

  // Snap boxes to cells; a box never starts before the previous one in its row ends.
  std::vector<std::vector<Placed>> rows(timeline.rows.size());
  long long columns = 0;
  std::size_t width = 1;
  for (std::size_t i = 0; i < timeline.rows.size(); ++i) {
    long long cursor = 0;
    for (const auto& box : timeline.rows[i].boxes) {
      if (box.end <= box.start) continue;
      Placed placed;
      placed.first = std::max(cursor, std::llround(box.start / cell));
      placed.last = std::max(placed.first + 1, std::llround(box.end / cell));
      placed.text = fmt::format("{}{}", kind_letter(box.kind), box.label);
      if (shaded && !box.label.empty()) placed.text += static_cast<char>('a' + std::clamp(box.shade, 0, 25));
      const auto cells = static_cast<std::size_t>(placed.last - placed.first);
      width = std::max(width, (placed.text.size() + 2 + cells - 1) / cells);
      cursor = placed.last;
      columns = std::max(columns, placed.last);
      rows[i].push_back(std::move(placed));
    }
  }

  std::size_t name_width = 4;  // "time"
  for (const auto& row : timeline.rows) name_width = std::max(name_width, row.name.size());
  std::string out;
  if (!timeline.title.empty()) out += timeline.title + "\n";
  for (const auto& note : timeline.notes) out += note + "\n";

  // Ruler: the time at the start of every few cells, far enough apart to stay readable.
  std::string ruler = fmt::format("{:<{}} ", "time", name_width);
  const std::size_t origin = ruler.size();
  const long long every = std::max<long long>(1, static_cast<long long>((8 + width - 1) / width));
  for (long long c = 0; c <= columns; c += every) {
    const std::size_t at = origin + static_cast<std::size_t>(c) * width;
    if (at < ruler.size()) continue;
    ruler.append(at - ruler.size(), ' ');
    ruler += fmt::format("{:g}", static_cast<double>(c) * cell);
  }
  out += ruler + "\n";

  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::string line = fmt::format("{:<{}} ", timeline.rows[i].name, name_width);
    long long cursor = 0;
    for (const Placed& p : rows[i]) {
      line.append(static_cast<std::size_t>(p.first - cursor) * width, '.');
      const std::size_t span = static_cast<std::size_t>(p.last - p.first) * width;
      if (span >= p.text.size() + 2)
        line += "[" + p.text + std::string(span - p.text.size() - 2, ' ') + "]";
      else
        line += p.text.substr(0, span);
      cursor = p.last;
    }
    line.append(static_cast<std::size_t>(columns - cursor) * width, '.');
    out += line + "\n";
  }

  std::vector<BoxKind> present;
  for (const auto& row : timeline.rows)
    for (const auto& box : row.boxes)
      if (box.end > box.start && std::find(present.begin(), present.end(), box.kind) == present.end())
        present.push_back(box.kind);
  std::sort(present.begin(), present.end());
  std::string legend = fmt::format("one cell = {:g}", cell);
  if (!timeline.time_unit.empty()) legend += fmt::format(" ({})", timeline.time_unit);
  legend += ":";
  for (BoxKind k : present) legend += fmt::format(" {} {},", kind_letter(k), kind_word(k));
  legend += " . idle";
  if (shaded)
    legend += fmt::format("; the letter after the number is the {} (a = 0, b = 1, ...)",
                          timeline.shade_meaning.empty() ? std::string("shade") : timeline.shade_meaning);
  out += legend + "\n";
  return out;
}

}  // namespace tessera::plan
