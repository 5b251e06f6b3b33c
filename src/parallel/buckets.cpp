#include "parallel/buckets.h"

#include <algorithm>

#include "core/check.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

std::vector<Bucket> plan_buckets(const std::vector<nn::Unit>& units, int64_t bucket_elems,
                                 const std::vector<nn::ParamRange>& domain) {
  TS_CHECK(bucket_elems >= 1, "gradient buckets need at least one element, got {}", bucket_elems);
  for (size_t u = 1; u < units.size(); ++u) {
    TS_CHECK(units[u].owned.begin == units[u - 1].owned.end,
             "unit '{}' does not start where '{}' ends: buckets need units that own consecutive ranges",
             units[u].name, units[u - 1].name);
  }
  const std::vector<nn::ParamRange> pieces =
      !domain.empty() || units.empty()
          ? domain
          : std::vector<nn::ParamRange>{{units.front().owned.begin, units.back().owned.end}};
  // Walking down from the end of the buffer: each unit's range within each piece is a run; runs
  // join a bucket while they continue it inside the same piece, and it closes once it holds at
  // least the bucket size.
  std::vector<Bucket> buckets;
  int open_piece = -1;
  nn::ParamRange open{0, 0};
  const auto close = [&] {
    if (open.size() > 0) buckets.push_back({open, 0, 0, {}});
    open = {0, 0};
    open_piece = -1;
  };
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    for (int p = static_cast<int>(pieces.size()) - 1; p >= 0; --p) {
      const nn::ParamRange run = intersect(units[static_cast<size_t>(u)].owned, pieces[static_cast<size_t>(p)]);
      if (run.size() == 0) continue;
      if (open_piece != p || open.begin != run.end) close();
      if (open.size() == 0) {
        open = run;
        open_piece = p;
      } else {
        open.begin = run.begin;
      }
      if (open.size() >= bucket_elems) close();
    }
  }
  close();
  for (Bucket& b : buckets) {
    b.first_unit = -1;
    b.complete_unit = static_cast<int>(units.size());
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      for (const nn::ParamRange& r : units[static_cast<size_t>(u)].params) {
        if (intersect(r, b.range).size() > 0) {
          b.first_unit = std::max(b.first_unit, u);
          b.complete_unit = std::min(b.complete_unit, u);
          if (b.writers.empty() || b.writers.back() != u) b.writers.push_back(u);
        }
      }
    }
    TS_CHECK(b.first_unit >= 0, "no unit writes the gradient range [{}, {})", b.range.begin, b.range.end);
  }
  return buckets;
}

}  // namespace tessera::parallel
