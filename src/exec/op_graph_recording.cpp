#include "exec/op_graph_recording.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace tessera::exec {

namespace {

void fill_random(const Tensor& t, uint64_t stream) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(7, stream, static_cast<uint64_t>(i));
}

struct Run {
  OpTrace trace;
  std::vector<memory::remat::TracedUnit> units;
};

void run_once(nn::GPT& model, MemoryAccountant& memory, int first_unit, int units, int64_t B, int64_t T, Run& run) {
  nn::StepContext step{memory, model.parameters()};
  const int64_t C = model.config().n_embd;
  Tensor x = step.activation({B, T, C});
  fill_random(x, stream_id("op_graph:input"));
  Tensor dy = step.workspace({B, T, C});
  fill_random(dy, stream_id("op_graph:gradient"));
  const nn::GPT::Microbatch mb{};
  std::vector<nn::GPT::UnitCtx> ctx(static_cast<size_t>(units));
  run.units.assign(static_cast<size_t>(units), {});
  const OpTraceInstall install(&run.trace);
  for (int i = 0; i < units; ++i) {
    memory::remat::TracedUnit& u = run.units[static_cast<size_t>(i)];
    u.input = x.storage().get();
    u.forward_begin = run.trace.size();
    x = model.forward_unit(step, first_unit + i, ctx[static_cast<size_t>(i)], x, mb).y;
    u.forward_end = run.trace.size();
    u.output = x.storage().get();
    for (const nn::SavedTensor& s : ctx[static_cast<size_t>(i)].saved()) u.saved.push_back(s.tensor.storage().get());
  }
  for (int i = units - 1; i >= 0; --i) {
    memory::remat::TracedUnit& u = run.units[static_cast<size_t>(i)];
    u.backward_begin = run.trace.size();
    dy = model.backward_unit(step, first_unit + i, ctx[static_cast<size_t>(i)], dy, nn::BackwardPart::Both);
    u.backward_end = run.trace.size();
  }
}

}  // namespace

OpGraphRecording record_op_graph(nn::GPT& model, MemoryAccountant& memory, int first_unit, int units, int64_t B,
                                 int64_t T, int repeats) {
  TS_CHECK(repeats >= 1, "op graph recording: {} repeats, need at least 1", repeats);
  TS_CHECK(units >= 1 && first_unit >= 1 && first_unit + units - 1 <= model.config().n_layer,
           "op graph recording: units {} .. {} are not blocks of a model of {} layers", first_unit,
           first_unit + units - 1, model.config().n_layer);
  std::vector<Run> runs(static_cast<size_t>(repeats));
  for (Run& run : runs) run_once(model, memory, first_unit, units, B, T, run);
  const std::vector<OpTrace::Op>& ops = runs.front().trace.ops();
  std::vector<double> milliseconds(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) milliseconds[k] = ops[k].seconds * 1e3;
  for (const Run& run : runs) {
    const std::vector<OpTrace::Op>& other = run.trace.ops();
    TS_CHECK(other.size() == ops.size(), "op graph recording: a run made {} ops, the first {}", other.size(),
             ops.size());
    for (size_t k = 0; k < ops.size(); ++k) {
      TS_CHECK(std::strcmp(other[k].name, ops[k].name) == 0 && other[k].written.size() == ops[k].written.size(),
               "op graph recording: op {} was {} in one run and {} in another", k, ops[k].name, other[k].name);
      milliseconds[k] = std::min(milliseconds[k], other[k].seconds * 1e3);
    }
  }
  OpGraphRecording out{memory::remat::op_training_graph(runs.front().trace, runs.front().units, milliseconds), {}};
  out.trace = std::move(runs.front().trace);
  return out;
}

}  // namespace tessera::exec
