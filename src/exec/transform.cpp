#include "exec/transform.h"

#include "core/check.h"

namespace tessera::exec {

Event event_of(const Program& program, int index) {
  const Action& a = program.actions[static_cast<size_t>(index)];
  return Event{&program, index, a.phase, a.unit, a.chunk, a.microbatch};
}

std::string_view slot_name(TransformSlot slot) {
  switch (slot) {
    case TransformSlot::Observer: return "observer";
    case TransformSlot::ActivationPlacement: return "activation placement";
    case TransformSlot::ActivationEncoding: return "activation encoding";
    case TransformSlot::SharedParameters: return "shared parameters";
    case TransformSlot::TensorParallel: return "tensor parallel";
    case TransformSlot::ExpertParallel: return "expert parallel";
    case TransformSlot::LossScaling: return "loss scaling";
    case TransformSlot::ParameterPlacement: return "parameter placement";
    case TransformSlot::ExpertParameterPlacement: return "expert parameter placement";
    case TransformSlot::Precision: return "precision";
    case TransformSlot::GradientExchange: return "gradient exchange";
    case TransformSlot::GradientReduction: return "gradient reduction";
    case TransformSlot::ExpertGradientReduction: return "expert gradient reduction";
  }
  return "unknown";
}

void TransformChain::add(TransformSlot slot, Transform& transform) {
  Transform*& place = slots_[static_cast<size_t>(slot)];
  TS_CHECK(place == nullptr, "the {} slot of the transform chain already holds '{}'; '{}' cannot take it too",
           slot_name(slot), place->name(), transform.name());
  place = &transform;
}

void TransformChain::remove(TransformSlot slot) { slots_[static_cast<size_t>(slot)] = nullptr; }

void TransformChain::begin(const Program& program) {
  for (Transform* t : slots_) {
    if (t) t->begin(program);
  }
}

void TransformChain::before(const Event& event) {
  for (Transform* t : slots_) {
    if (t) t->before(event);
  }
}

void TransformChain::after(const Event& event) {
  for (size_t i = slots_.size(); i-- > 0;) {
    if (slots_[i]) slots_[i]->after(event);
  }
}

void TransformChain::finish(const Program& program) {
  for (size_t i = slots_.size(); i-- > 0;) {
    if (slots_[i]) slots_[i]->finish(program);
  }
}

nn::SequenceShard TransformChain::sequence_shard() const {
  nn::SequenceShard shard;
  const Transform* splitting = nullptr;
  for (const Transform* t : slots_) {
    if (t == nullptr || t->sequence_shard().parts == 1) continue;
    TS_CHECK(splitting == nullptr, "'{}' and '{}' both split the residual stream's sequences", splitting->name(),
             t->name());
    splitting = t;
    shard = t->sequence_shard();
  }
  return shard;
}

}  // namespace tessera::exec
