#pragma once
// The graph of operations of a run of a model's blocks (memory/remat/op_graph.h), recorded by
// running them: their forward, one after the other, then their backward, on random values, with
// an op trace installed (core/op_trace.h). The trace gives the ops, what each read and wrote and
// its time; each block's saved tensors (nn::GPT::UnitCtx::saved) are the unit-level truth the graph
// is checked against. The ops' costs are measured: each op's least time, in milliseconds, over
// `repeats` runs of the same program (a run whose ops differ from the first is refused).
#include <cstdint>

#include "memory/remat/op_graph.h"
#include "nn/gpt.h"

namespace tessera::exec {

struct OpGraphRecording {
  memory::remat::OpGraph graph;
  OpTrace trace;  // the first run's, which the graph's nodes name (OpGraph::node_of_op)
};

// Units first_unit .. first_unit + units - 1 of `model` (blocks: 1 .. n_layer), microbatch [B, T],
// activations in f32, every tensor from `memory`.
OpGraphRecording record_op_graph(nn::GPT& model, MemoryAccountant& memory, int first_unit, int units, int64_t B,
                                 int64_t T, int repeats = 3);

}  // namespace tessera::exec
