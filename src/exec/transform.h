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
//   SharedParameters   the pipeline's parameters held on two stages (the tied embedding): their
//                      gradients summed between the holders when the program finishes, after the
//                      sequence-parallel sum (parallel/pipeline_stages.h)
//   TensorParallel     the tensor-parallel region every unit computes with (nn/tensor_region.h),
//                      installed in the event's step context; under sequence parallelism, when the
//                      program finishes, the sum over tp of the gradients of the parameters every
//                      rank holds whole, after the data-parallel reduction (parallel/tensor_parallel.h)
//   ExpertParallel     expert parallelism's all-to-all every unit computes with, installed the
//                      same way (parallel/expert_parallel.h)
//   LossScaling        fp16's loss scale: each microbatch's gradient scale times the scale the
//                      program runs with (parallel/loss_scaling.h)
//   ParameterPlacement where the parameters are: ZeRO-3 gathers a unit's shards before it runs and
//                      frees them after; offloading fetches from host
//   ExpertParameterPlacement the same for the expert parameters under expert parallelism: ZeRO-3
//                      shards them over their own group (edp) and gathers them there
//   Precision          the working copies' dtype (mixed precision casts)
//   GradientExchange   whether the step's gradients are reduced at all: 1-bit Adam's compressed
//                      steps keep each rank's own (parallel/one_bit_exchange.h); set as the
//                      program begins, before the reductions plan their buckets
//   GradientReduction  data-parallel and ZeRO reduction of gradient buckets, posted right after
//                      the action that completes a bucket
//   ExpertGradientReduction innermost: the same over the experts' own group
//
// finish() runs innermost first too, so what a transform does there sees the reductions of the
// slots inside it complete: the sequence-parallel sum reads reduced gradients, the tied
// embedding's sum reads them summed over tp.
//
// One transform per slot; a second one is refused, naming both.
#include <array>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "nn/saved_tensor.h"
#include "nn/step_context.h"
#include "nn/tensor_region.h"

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
  // The step context the unit action runs with. Before the action a transform may install in it
  // what the unit computes with (tensor parallelism's region, expert parallelism's exchange, the
  // loss scale in its gradient scale): the model holds no parallel code and the interpreter none
  // of its own. Null for events not made by the interpreter.
  nn::StepContext* step = nullptr;

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
  // The part of every sequence the residual stream holds while this transform is in the chain
  // (nn/tensor_region.h), which is what crosses a pipeline boundary: the whole sequence unless the
  // transform splits it (sequence parallelism). The interpreter shapes its receive buffers by it
  // before any unit action has run.
  virtual nn::SequenceShard sequence_shard() const { return {}; }
};

// The slots, outermost first (the order above).
enum class TransformSlot : uint8_t {
  Observer,
  ActivationPlacement,
  ActivationEncoding,
  SharedParameters,
  TensorParallel,
  ExpertParallel,
  LossScaling,
  ParameterPlacement,
  ExpertParameterPlacement,
  Precision,
  GradientExchange,
  GradientReduction,
  ExpertGradientReduction
};
inline constexpr size_t kTransformSlots = 13;
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
  // The residual stream's part of every sequence: that of the transform that splits it (at most
  // one does), the whole sequence otherwise.
  nn::SequenceShard sequence_shard() const;

 private:
  std::array<Transform*, kTransformSlots> slots_{};
};

}  // namespace tessera::exec
