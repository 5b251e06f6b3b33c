#pragma once
// Transforms: parallelism and memory techniques applied to a model that contains none of them.
// The interpreter tells every transform of its chain about each action it runs, as a typed event
// {unit, chunk, microbatch, phase} with the whole program, so a transform knows where it is and
// what comes next without guessing from call order.
//
// The chain is ordered by slot, a fixed order documented here (docs/execution.md): before an
// action the transforms run outermost first; after it, innermost first (like nested scopes):
//
//   Observer           outermost: sees the action before any transform prepared it and after
//                      all have finished with it (recorders, timers, tests)
//   ActivationPlacement where a unit's saved activations are: offloading writes them to the nvme
//                      tier after the forward that saved them and reads them back before the
//                      backward that reads them (exec/activation_offload.h)
//   ActivationEncoding what form they wait in: encoding replaces a unit's saved tensors by their
//                      encoded forms after its forward (so placement moves the encoded bytes) and
//                      decodes them before its backward, after placement brought them back
//                      (exec/activation_encoding.h)
//   ParameterPlacement where the parameters are: ZeRO-3 gathers a unit's shards before it runs and
//                      frees them after; offloading fetches from host
//   ExpertParameterPlacement the same for the expert parameters under expert parallelism: ZeRO-3
//                      shards them over their own group (edp) and gathers them there
//   Precision          the working copies' dtype (mixed precision casts)
//   GradientReduction  innermost: data-parallel and ZeRO reduction of gradient buckets, posted
//                      right after the action that completes a bucket
//
// One transform per slot; a second one is refused, naming both.
#include <array>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "nn/saved_tensor.h"

#include "exec/program.h"

namespace tessera::exec {

struct Event {
  const Program* program = nullptr;
  int index = 0;  // position of the action in the program
  Phase phase = Phase::Forward;
  int unit = 0;
  int chunk = 0;
  int microbatch = 0;
  // After a training forward that keeps the unit's activations: every tensor the unit saved for
  // its backward (nn::GPT::UnitCtx::saved); null otherwise. A transform that changes the form
  // they wait in (the activation encoding) replaces entries, for the transforms outside it.
  std::vector<nn::SavedTensor>* saved = nullptr;

  const Action& action() const { return program->actions[static_cast<size_t>(index)]; }
};

Event event_of(const Program& program, int index);

class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::string_view name() const = 0;
  // A program starts (a training step or an evaluation batch).
  virtual void begin(const Program& program) {}
  virtual void before(const Event& event) {}
  virtual void after(const Event& event) {}
  // Every unit action of the program ran; the optimizer step (if any) comes next. A program of
  // several batches (PipeDream-2BW) finishes at each of its optimizer steps, its later batches'
  // actions following.
  virtual void finish(const Program& program) {}
};

// ExpertParameterPlacement: ZeRO-3's gathering of the expert parameters over their own group, beside
// the dense parameters' over dp in ParameterPlacement. Both run before Precision, which casts what
// they gathered.
// ExpertGradientReduction: the reduction of the expert parameters over their own group (expert
// parallelism's edp group), beside the dense parameters' over dp.
enum class TransformSlot : uint8_t {
  Observer,
  ActivationPlacement,
  ActivationEncoding,
  ParameterPlacement,
  ExpertParameterPlacement,
  Precision,
  GradientReduction,
  ExpertGradientReduction
};
inline constexpr size_t kTransformSlots = 8;
std::string_view slot_name(TransformSlot slot);

class TransformChain {
 public:
  // `transform` must outlive the chain's use.
  void add(TransformSlot slot, Transform& transform);
  void remove(TransformSlot slot);
  Transform* at(TransformSlot slot) const { return slots_[static_cast<size_t>(slot)]; }

  void begin(const Program& program);
  void before(const Event& event);
  void after(const Event& event);
  void finish(const Program& program);

 private:
  std::array<Transform*, kTransformSlots> slots_{};
};

}  // namespace tessera::exec
