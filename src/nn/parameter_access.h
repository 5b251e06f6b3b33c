#pragma once
// Where a module finds a parameter's storage while it runs: its working copy (the values the op
// reads, [p.shape]) and its gradient target (where the op accumulates, +=, [p.shape]). Modules ask
// through their StepContext at each call instead of keeping pointers, so the answer can change with
// the event being executed: ZeRO-3 answers with a unit's gathered buffer, ZeRO-2 with the gradient
// bucket of the current microbatch, mixed precision with a low-precision copy.
#include "core/tensor.h"

namespace tessera::nn {

struct Parameter;

class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;
  virtual Tensor weight(const Parameter& p) = 0;
  virtual Tensor grad(const Parameter& p) = 0;
};

// Where a loader writes parameters (a checkpoint, weights to start from), one at a time: take(p)
// hands out a tensor [p.shape] to fill with p's value, and put(p) keeps what was written into it,
// before the next parameter is taken. Why two calls: a sink need not hold the model in compute
// memory (ZeRO-3's shard in the nvme tier writes each parameter there when it is put), so the
// loader says when a parameter is complete instead of the sink guessing it.
class ParameterSink {
 public:
  virtual ~ParameterSink() = default;
  virtual Tensor take(const Parameter& p) = 0;
  virtual void put(const Parameter& p) = 0;
};

// The sink over an access whose weights are the values themselves (a store, a gathered buffer):
// what is written into a taken tensor is kept already, so putting has nothing to do.
class InPlaceSink final : public ParameterSink {
 public:
  explicit InPlaceSink(ParameterAccess& values) : values_(values) {}
  Tensor take(const Parameter& p) override { return values_.weight(p); }
  void put(const Parameter&) override {}

 private:
  ParameterAccess& values_;
};

}  // namespace tessera::nn
