#include "parallel/weight_versions.h"

#include <algorithm>

#include "exec/program.h"
#include "exec/transform.h"

namespace tessera::parallel {

WeightVersions::WeightVersions(nn::ParameterStore& store, std::vector<const nn::Parameter*> params,
                               MemoryAccountant& memory, exec::ParameterOwnership& ownership)
    : store_(store), ownership_(ownership), params_(std::move(params)) {
  TS_CHECK(store.holds_values(), "PipeDream-2BW keeps the previous weight version of the store's values, but the store "
           "no longer holds them (ZeRO-3 shards the parameters: use parallel.zero_stage 0, 1 or 2 with 2bw)");
  stash_offset_.assign(static_cast<size_t>(store.size()), -1);
  std::vector<int> ids;
  int64_t elements = 0;
  for (const nn::Parameter* p : params_) {
    stash_offset_[static_cast<size_t>(p->id)] = elements;
    elements += p->numel();
    ids.push_back(p->id);
  }
  stash_ = Tensor::zeros({std::max<int64_t>(elements, 1)}, DType::F32, MemoryTag::WeightStash, memory);
  ownership_.claim(exec::Role::Working, *this, ids);
}

WeightVersions::~WeightVersions() { ownership_.release(*this); }

void WeightVersions::before_step() {
  for (const nn::Parameter* p : params_) {
    const Tensor value = store_.value(*p);
    std::copy_n(value.data<float>(), p->numel(), stash_.data<float>() + stash_offset_[static_cast<size_t>(p->id)]);
  }
  holds_previous_ = true;
  ++newest_;
}

void WeightVersions::restore(int64_t newest) {
  TS_CHECK(newest >= 0, "a weight version counts optimizer steps; it cannot be {}", newest);
  newest_ = newest;
  holds_previous_ = newest > 0;
}

std::vector<std::pair<const nn::Parameter*, Tensor>> WeightVersions::previous() {
  std::vector<std::pair<const nn::Parameter*, Tensor>> out;
  for (const nn::Parameter* p : params_) out.emplace_back(p, stashed(*p));
  return out;
}

Tensor WeightVersions::stashed(const nn::Parameter& p) {
  const int64_t at = stash_offset_[static_cast<size_t>(p.id)];
  return stash_.slice(0, at, at + p.numel()).reshape(p.shape);
}

Tensor WeightVersions::working(const nn::Parameter& p, const exec::Event* event) {
  const int64_t version = event == nullptr ? -1 : event->action().weight_version;
  if (version < 0 || version == newest_) return store_.value(p);
  TS_CHECK(holds_previous_ && version == newest_ - 1,
           "{} reads weight version {} of '{}', but this rank holds version {}{}: PipeDream-2BW keeps two versions, "
           "the newest and the one before it (the schedule and the optimizer steps taken disagree; a resumed run "
           "must load the previous version from its checkpoint)",
           exec::describe(event->action()), version, p.name, newest_,
           holds_previous_ ? fmt::format(" and {}", newest_ - 1) : std::string(" only"));
  return stashed(p);
}

std::vector<const nn::Parameter*> parameters_of_units(const nn::ParameterStore& store,
                                                      const std::vector<nn::Unit>& all_units,
                                                      std::span<const int> units) {
  std::vector<const nn::Parameter*> out;
  for (const nn::Parameter& p : store.all()) {
    const auto begin = static_cast<int64_t>(p.offset), end = begin + p.numel();
    const bool read = std::any_of(units.begin(), units.end(), [&](int u) {
      const std::vector<nn::ParamRange>& ranges = all_units[static_cast<size_t>(u)].params;
      return std::any_of(ranges.begin(), ranges.end(),
                         [&](const nn::ParamRange& r) { return begin >= r.begin && end <= r.end; });
    });
    if (read) out.push_back(&p);
  }
  return out;
}

}  // namespace tessera::parallel
