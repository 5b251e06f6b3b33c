#include "parallel/buckets.h"

#include <algorithm>

#include "core/check.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

std::vector<Bucket> plan_buckets(const std::vector<nn::Unit>& units, int64_t bucket_elems) {
  TS_CHECK(bucket_elems >= 1, "gradient buckets need at least one element, got {}", bucket_elems);
  for (size_t u = 1; u < units.size(); ++u) {
    TS_CHECK(units[u].owned.begin == units[u - 1].owned.end,
             "unit '{}' does not start where '{}' ends: buckets need units that own consecutive ranges",
             units[u].name, units[u - 1].name);
  }
  std::vector<Bucket> buckets;
  int64_t end = units.empty() ? 0 : units.back().owned.end;
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    const int64_t begin = units[static_cast<size_t>(u)].owned.begin;
    if (end - begin >= bucket_elems || u == 0) {
      if (end > begin) buckets.push_back({{begin, end}, 0, 0, {}});
      end = begin;
    }
  }
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
