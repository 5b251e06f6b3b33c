#include "parallel/working_copies.h"

#include "core/profiler.h"

namespace tessera::parallel {

WorkingCopies::WorkingCopies(const nn::ParameterStore& params, DType dtype, MemoryAccountant& memory,
                             exec::ParameterOwnership& ownership)
    : dtype_(dtype), memory_(memory), ownership_(ownership) {
  TS_CHECK(dtype == DType::BF16 || dtype == DType::F16, "mixed-precision working copies are bf16 or f16, not {}",
           dtype_name(dtype));
  persistent_.resize(static_cast<size_t>(params.size()));
  per_action_.resize(static_cast<size_t>(params.size()));
  below_ = ownership.claim_over(exec::Role::Working, *this);
}

WorkingCopies::~WorkingCopies() { ownership_.release(*this); }

void WorkingCopies::invalidate() {
  for (std::vector<Copy>& copies : persistent_) {
    for (Copy& c : copies) c.fresh = false;
  }
}

void WorkingCopies::after(const exec::Event&) {
  for (int id : per_action_ids_) per_action_[static_cast<size_t>(id)] = Tensor();
  per_action_ids_.clear();
}

void WorkingCopies::cast(Tensor& copy, const Tensor& source) {
  const ProfileScope timer("cast working copy", ProfileCategory::Cast);
  TS_CHECK(source.dtype() == DType::F32 && source.is_contiguous(),
           "mixed precision casts contiguous f32 weights, got {} {}", dtype_name(source.dtype()), source.shape_string());
  const auto n = static_cast<size_t>(source.numel());
  if (dtype_ == DType::BF16) {
    convert_f32_to_bf16(copy.data<bf16>(), source.data<float>(), n);
  } else {
    convert_f32_to_f16(copy.data<f16>(), source.data<float>(), n);
  }
  ++casts_;
}

Tensor WorkingCopies::working(const nn::Parameter& p, const exec::Event* event) {
  exec::StorageOwner& below = *below_[static_cast<size_t>(p.id)];
  const Tensor source = below.working(p, event);
  if (below.working_copies_persist()) {
    std::vector<Copy>& copies = persistent_[static_cast<size_t>(p.id)];
    for (Copy& c : copies) {
      if (c.source != source.raw()) continue;
      if (!c.fresh) cast(c.copy, source);
      c.fresh = true;
      return c.copy;
    }
    Copy c{source.raw(), Tensor::empty(source.shape(), dtype_, MemoryTag::WorkingCopies, memory_), true};
    cast(c.copy, source);
    copies.push_back(c);
    return c.copy;
  }
  Tensor& copy = per_action_[static_cast<size_t>(p.id)];
  if (!copy.defined()) {
    copy = Tensor::empty(source.shape(), dtype_, MemoryTag::WorkingCopies, memory_);
    cast(copy, source);
    per_action_ids_.push_back(p.id);
  }
  return copy;
}

}  // namespace tessera::parallel
