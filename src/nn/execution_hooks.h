#pragma once
// Points where a transform applied from outside the model (data parallelism, ZeRO, offloading,
// checkpointing) acts while the model runs, without the model knowing what the transform does.
// The model is a chain of units — 0: embedding, 1..L: the blocks, L+1: final norm and head — and
// calls these around each unit's forward and backward. after_backward(u) means the gradients of
// unit u's parameters for this microbatch are complete: a data-parallel transform may reduce them.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::nn {

struct ParamRange {
  int64_t begin = 0;  // element offsets in the flat parameter/gradient buffers
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

struct Unit {
  std::string name;                // "embed", "blocks.3", "head"
  std::vector<ParamRange> params;  // every parameter the unit reads (a tied head also reads the embedding)
  ParamRange owned;                // the parameters declared by this unit (disjoint across units, in order)
};

class ExecutionHooks {
 public:
  virtual ~ExecutionHooks() = default;
  virtual void before_forward(int unit) {}
  virtual void after_forward(int unit) {}
  virtual void before_backward(int unit) {}
  virtual void after_backward(int unit) {}
};

}  // namespace tessera::nn
