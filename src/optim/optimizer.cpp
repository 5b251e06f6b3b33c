#include "optim/optimizer.h"

#include <algorithm>

namespace tessera::optim {

Tensor& StateDict::at(std::string_view name) {
  for (auto& [key, tensor] : tensors) {
    if (key == name) return tensor;
  }
  TS_FAIL("optimizer state has no tensor '{}'", name);
}

std::vector<Segment> whole_parameters(nn::ParameterStore& store) {
  std::vector<Segment> out;
  out.reserve(store.all().size());
  float* values = store.flat_values().data<float>();
  float* grads = store.flat_grads().data<float>();
  for (const auto& p : store.all()) {
    const auto at = static_cast<int64_t>(p.offset);
    out.push_back({&p, 0, p.numel(), values + at, grads + at, p.spec.split_mask()});
  }
  return out;
}

std::vector<Segment> segments_of_range(const nn::ParameterStore& store, nn::ParamRange owned, float* values,
                                       float* grads, uint32_t sharded_over) {
  std::vector<Segment> out;
  for (const auto& p : store.all()) {
    const auto first = static_cast<int64_t>(p.offset);
    const int64_t lo = std::max(owned.begin, first), hi = std::min(owned.end, first + p.numel());
    if (hi <= lo) continue;
    out.push_back({&p, lo - first, hi - first, values + (lo - owned.begin), grads + (lo - owned.begin),
                   sharded_over | p.spec.split_mask()});
  }
  return out;
}

int64_t total_elements(std::span<const Segment> segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.size();
  return n;
}

}  // namespace tessera::optim
