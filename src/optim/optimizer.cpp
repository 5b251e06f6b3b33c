#include "optim/optimizer.h"

#include <algorithm>

namespace tessera::optim {

namespace {
Tensor view_of(float* data, int64_t size) {
  return data == nullptr ? Tensor() : Tensor::from_external(data, {size}, DType::F32);
}
}  // namespace

Tensor Segment::values() const { return view_of(value, size()); }
Tensor Segment::grads() const { return view_of(grad, size()); }

Tensor& StateDict::at(std::string_view name) {
  for (StateTensor& t : tensors) {
    if (t.name == name) return t.values;
  }
  TS_FAIL("optimizer state has no tensor '{}'", name);
}

Tensor StateDict::part(const StateTensor& tensor, size_t index, std::span<const int64_t> element_offsets) {
  const std::span<const int64_t> offsets =
      tensor.segment_offsets.empty() ? element_offsets : std::span<const int64_t>(tensor.segment_offsets);
  TS_CHECK(index + 1 < offsets.size(), "optimizer state '{}' has {} segment parts, asked for part {}", tensor.name,
           offsets.size() - 1, index);
  return tensor.values.slice(0, offsets[index], offsets[index + 1]);
}

void load_state_tensor(StateDict& state, std::string_view name, Tensor& into, std::string_view optimizer) {
  const Tensor& from = state.at(name);
  TS_CHECK(from.numel() == into.numel() && from.dtype() == into.dtype(),
           "{} state '{}' has {} elements of {}, this optimizer holds {} of {}: it was saved for other parameters or "
           "settings",
           optimizer, name, from.numel(), dtype_name(from.dtype()), into.numel(), dtype_name(into.dtype()));
  if (from.numel() > 0 && from.raw() != into.raw()) into.copy_from(from.reshape(into.shape()));
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
    // No values or gradients: they live elsewhere (an offloaded shard), and the segments carry none.
    out.push_back({&p, lo - first, hi - first, values != nullptr ? values + (lo - owned.begin) : nullptr,
                   grads != nullptr ? grads + (lo - owned.begin) : nullptr, sharded_over | p.spec.split_mask()});
  }
  return out;
}

int64_t total_elements(std::span<const Segment> segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.size();
  return n;
}

bool same_layout(std::span<const Segment> a, std::span<const Segment> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].param != b[i].param || a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
  }
  return true;
}

}  // namespace tessera::optim
