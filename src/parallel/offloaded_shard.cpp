#include "parallel/offloaded_shard.h"

#include <algorithm>

#include "core/check.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

OffloadedShard::OffloadedShard(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine,
                               const float* values)
    : OffloadedShard(store, params, mine) {
  // Delegated: should the writes fail, the destructor releases the extents.
  Works works = write_range(mine, values);
  wait_all(works);
}

OffloadedShard::OffloadedShard(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine)
    : store_(store), mine_(mine) {
  for (const nn::Parameter& p : params.all()) {
    const auto first = static_cast<int64_t>(p.offset);
    const nn::ParamRange part = intersect({first, first + p.numel()}, mine);
    if (part.size() > 0) parts_.push_back({part, {}});
  }
  std::sort(parts_.begin(), parts_.end(), [](const Part& a, const Part& b) { return a.flat.begin < b.flat.begin; });
  int64_t covered = mine.begin;
  for (const Part& part : parts_) {
    TS_CHECK(part.flat.begin == covered, "ZeRO-3's offloaded shard [{}, {}): element {} belongs to no parameter",
             mine.begin, mine.end, covered);
    covered = part.flat.end;
  }
  TS_CHECK(covered == mine.end, "ZeRO-3's offloaded shard [{}, {}) ends at element {} of the parameters", mine.begin,
           mine.end, covered);
  try {
    for (Part& part : parts_) part.extent = store_.allocate(sizeof(float) * static_cast<size_t>(part.flat.size()));
  } catch (...) {
    for (const Part& part : parts_) {
      if (!part.extent.empty()) store_.release(part.extent);
    }
    throw;
  }
}

OffloadedShard::~OffloadedShard() {
  for (const Part& part : parts_) store_.release(part.extent);
}

std::pair<size_t, size_t> OffloadedShard::parts_of(nn::ParamRange range) const {
  const auto first = std::lower_bound(parts_.begin(), parts_.end(), range.begin,
                                      [](const Part& p, int64_t at) { return p.flat.begin < at; });
  auto last = first;
  while (last != parts_.end() && last->flat.end <= range.end) ++last;
  TS_CHECK(range.size() == 0 || (first != parts_.end() && first->flat.begin == range.begin && last != first &&
                                 std::prev(last)->flat.end == range.end),
           "ZeRO-3's offloaded shard [{}, {}) moves whole parameters' parts; [{}, {}) does not start and end on them",
           mine_.begin, mine_.end, range.begin, range.end);
  return {static_cast<size_t>(first - parts_.begin()), static_cast<size_t>(last - parts_.begin())};
}

OffloadedShard::Works OffloadedShard::read_range(nn::ParamRange range, float* into) const {
  Works works;
  if (range.size() == 0) return works;
  const auto [first, last] = parts_of(range);
  for (size_t i = first; i < last; ++i) {
    const Part& part = parts_[i];
    works.push_back(store_.read(part.extent, into + (part.flat.begin - range.begin),
                                sizeof(float) * static_cast<size_t>(part.flat.size())));
  }
  return works;
}

OffloadedShard::Works OffloadedShard::write_range(nn::ParamRange range, const float* from) {
  Works works;
  if (range.size() == 0) return works;
  const auto [first, last] = parts_of(range);
  for (size_t i = first; i < last; ++i) {
    const Part& part = parts_[i];
    works.push_back(store_.write(part.extent, from + (part.flat.begin - range.begin),
                                 sizeof(float) * static_cast<size_t>(part.flat.size())));
  }
  return works;
}

OffloadedShard::Works OffloadedShard::read(int64_t first, int64_t count, float* into) {
  return read_range({mine_.begin + first, mine_.begin + first + count}, into);
}

OffloadedShard::Works OffloadedShard::write(int64_t first, int64_t count, const float* from) {
  return write_range({mine_.begin + first, mine_.begin + first + count}, from);
}

void wait_all(OffloadedShard::Works& works) {
  // Every handle is waited for, even after an error: the memory they move must outlive them.
  std::exception_ptr error;
  for (const auto& w : works) {
    try {
      w->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  works.clear();
  if (error) std::rethrow_exception(error);
}

}  // namespace tessera::parallel
