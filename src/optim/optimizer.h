#pragma once
// The optimizer interface. An optimizer updates the elements this rank owns — the master copy —
// given as segments: runs of one parameter's elements with their values and reduced gradients.
// It updates them through the ops layer (ops/optimizer_update.h) on the segments' tensor views and
// its state's, never calling a backend itself, so a device backend brings its updates to the ops
// and no optimizer changes (Adafactor's too: runs place its elements in the whole tensor).
// Who owns which elements is decided outside (a plain run owns everything, ZeRO a shard of the
// flat buffer, tensor parallelism a block of each matrix); the optimizer only sees segments, so
// the same AdamW serves every layout, and per-parameter rules (weight decay on matrices only) read
// the segment's parameter.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/parameters.h"
#include "nn/unit.h"

namespace tessera::optim {

struct Segment {
  const nn::Parameter* param = nullptr;
  int64_t begin = 0;  // elements [begin, end) of the parameter (its local flat order)
  int64_t end = 0;
  float* value = nullptr;  // master values of those elements
  float* grad = nullptr;   // their reduced gradient (clipping scales it in place)
  // Parallel dimensions over which the parameter's elements are split among ranks (a bit per
  // config::MeshDim): a global norm sums this segment's squares over those groups and counts it
  // once over every other dimension, where it is replicated.
  uint32_t sharded_over = 0;
  int64_t size() const { return end - begin; }
  // The values and the gradient as 1-D f32 tensors of size() elements, views of the buffers above
  // (which outlive them), for the ops an optimizer runs (ops/optimizer_update.h); undefined where
  // the pointer is null.
  Tensor values() const;
  Tensor grads() const;
};

// One tensor of an optimizer's state: a view of the optimizer's own storage, flat.
struct StateTensor {
  std::string name;
  Tensor values;
  // Where segment i's part of it begins: segments + 1 offsets. Empty: one entry per owned element
  // in segment order (AdamW's moments); per-tensor state (Adafactor's row and column statistics,
  // 8-bit block scales) has parts of other sizes, and segments with no part of it (a factored
  // matrix has no per-element second moment) have empty parts.
  std::vector<int64_t> segment_offsets;
};

// The optimizer's state over the owned elements, in segment order, and the number of steps taken.
struct StateDict {
  int64_t steps = 0;
  std::vector<StateTensor> tensors;
  Tensor& at(std::string_view name);
  // Segment `index`'s part of `tensor`, where `element_offsets` are the segments' first elements
  // in the owned order (segments + 1 entries, for per-element tensors).
  static Tensor part(const StateTensor& tensor, size_t index, std::span<const int64_t> element_offsets);
};

// Copies `state`'s tensor `name` into `into` (same number of elements and dtype), unless it is
// already `into`'s storage; `optimizer` names the optimizer in the error.
void load_state_tensor(StateDict& state, std::string_view name, Tensor& into, std::string_view optimizer);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;
  // One update of every owned element. The segments must cover exactly the owned elements, in the
  // same order every step (the state is laid out in that order).
  virtual void step(float lr, std::span<const Segment> segments) = 0;
  virtual StateDict state_dict() = 0;
  // Copies a state of the same layout in (e.g. from a checkpoint).
  virtual void load_state_dict(StateDict state) = 0;
  virtual int64_t steps_taken() const = 0;
  virtual int64_t owned_elements() const = 0;
};

// Every parameter of a store whose buffers it holds, whole: the segments of a one-process run.
std::vector<Segment> whole_parameters(nn::ParameterStore& store);
// The segments of the flat range `owned` (clipped to each parameter), where flat element
// owned.begin + i has its value at values[i] and its gradient at grads[i]; `sharded_over` adds the
// mesh dimensions the flat buffer itself is sharded over (ZeRO: dp) to each parameter's own splits.
std::vector<Segment> segments_of_range(const nn::ParameterStore& store, nn::ParamRange owned, float* values,
                                       float* grads, uint32_t sharded_over);
int64_t total_elements(std::span<const Segment> segments);
// Whether two lists of segments cover the same parameters' same elements in the same order (an
// optimizer with per-tensor state checks each step's segments against the layout it was built for).
bool same_layout(std::span<const Segment> a, std::span<const Segment> b);
// Weights are decayed and adapted; biases and norm gains are not (nn::ParameterRole: the role the
// model declared, not the number of dimensions, so an MoE layer's stacked expert biases are biases).
inline bool is_weight(const nn::Parameter& p) { return p.role == nn::ParameterRole::Weight; }

}  // namespace tessera::optim
