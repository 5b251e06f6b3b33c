#include "optim/tensor_statistics.h"

#include <algorithm>

namespace tessera::optim {

TensorSums::TensorSums(std::vector<int64_t> slots) : offsets_{0} {
  for (int64_t n : slots) offsets_.push_back(offsets_.back() + n);
  values_.assign(static_cast<size_t>(offsets_.back()), 0.0);
}

std::span<double> TensorSums::of(const nn::Parameter& p) {
  const auto id = static_cast<size_t>(p.id);
  TS_CHECK(id + 1 < offsets_.size(), "parameter '{}' (id {}) is not in the statistics table of {} parameters", p.name,
           p.id, offsets_.size() - 1);
  return std::span(values_).subspan(static_cast<size_t>(offsets_[id]),
                                    static_cast<size_t>(offsets_[id + 1] - offsets_[id]));
}

void TensorSums::clear() { std::fill(values_.begin(), values_.end(), 0.0); }

void TensorSums::reduce(const ShardReduction* reduction, std::span<const Segment> segments) {
  if (reduction == nullptr) return;
  const uint32_t dims = reduction->sharded_dims();
  for (int d = 0; dims >> d != 0; ++d) {
    if ((dims >> d & 1u) == 0) continue;
    // A parameter replicated over d (every rank of the group holds the same elements) must not be
    // summed over it: it takes part with zeros and keeps its own value.
    std::vector<std::pair<size_t, std::vector<double>>> kept;
    for (const Segment& s : segments) {
      if ((s.sharded_over >> d & 1u) != 0) continue;
      std::span<double> mine = of(*s.param);
      if (std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return k.first == size_t(s.param->id); })) continue;
      kept.emplace_back(static_cast<size_t>(s.param->id), std::vector<double>(mine.begin(), mine.end()));
      std::fill(mine.begin(), mine.end(), 0.0);
    }
    reduction->sum(d, values_);
    for (auto& [id, saved] : kept) {
      std::copy(saved.begin(), saved.end(), values_.begin() + offsets_[id]);
    }
  }
}

}  // namespace tessera::optim
