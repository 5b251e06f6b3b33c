#pragma once
// The parameters of a pipeline rank: which it holds (those read by the units of its stages), and
// the three things a pipeline needs of them beyond a one-stage run:
//   - the master copies of every other parameter are claimed by this object, which answers for
//     them with no segments, so the optimizer and the gradient norm see this rank's parameters only;
//   - a parameter read on two ranks (GPT-2's tied embedding: the first stage's embedding and the
//     last stage's head, Megatron's "embedding group") has its gradient summed between them
//     before the optimizer step, and both apply the same update; the norm counts it once. The sum
//     is this object's work as a transform in the chain's shared-parameters slot
//     (exec/transform.h): when a training program finishes, after the reductions and the
//     sequence-parallel sum of the slots inside it;
//   - the domain of the stage's data-parallel group: what it reduces and, under ZeRO-1/2, shards
//     (parallel/shard_layout.h). A shared parameter is a piece of its own, so the two holders'
//     groups split it alike and rank d of one sums its part with rank d of the other;
//   - full_values() brings every rank the current values of all parameters (for checkpoints,
//     sampling, tests), each from the lowest rank that holds it.
// Under ZeRO-3 the store keeps no values: the stage's data-parallel group shards the domain, and
// the whole model is its gathered pieces with the other stages' broadcast into the same buffer.
// The model still allocates every parameter on every rank; only the work is divided.
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/program.h"
#include "exec/transform.h"
#include "nn/gpt.h"

namespace tessera::parallel {

class PipelineStageParameters final : public exec::StorageOwner, public exec::Transform {
 public:
  // Collective over `pipeline` in full_values() and shared_gradients(). Claims the master role of
  // the parameters this rank does not hold.
  PipelineStageParameters(nn::GPT& model, const exec::StagePlan& plan, dist::Communicator& pipeline,
                          exec::ParameterOwnership& ownership);
  ~PipelineStageParameters() override;

  // The flat ranges of the parameters this rank holds, in flat order: a piece per shared
  // parameter, one per run of the others.
  std::vector<nn::ParamRange> domain() const;
  // Sums the gradients of parameters held by two ranks, over `segments` (this rank's master
  // segments, after the data-parallel reduction; under ZeRO the part of each this rank updates,
  // which is the same part on the other holder). Call after the program, before the norm.
  void sum_shared_gradients(std::span<const optim::Segment> segments);
  // Of `segments` (this rank's master segments), those the global norm counts here: all but the
  // parameters another, lower rank also holds; each marked as summed over the pipeline group.
  std::vector<optim::Segment> norm_segments(std::span<const optim::Segment> segments) const;
  // Whether a lower pipeline rank also holds `p` (the last stage's tied head: the first stage's
  // embedding); that rank writes it to checkpoints.
  bool held_by_lower_rank(const nn::Parameter& p) const {
    return holders_[static_cast<size_t>(p.id)].front() != rank_;
  }
  // Every parameter's current value on every rank, broadcast from the lowest rank holding it, in
  // `values` (the flat order; under ZeRO-3 a gathered buffer whose stage parameters are current)
  // or, when null, in the store's values.
  void full_values(float* values = nullptr);

  std::string_view owner_name() const override { return "another pipeline stage"; }
  // exec::Transform: a training program's finish sums the shared gradients over this rank's
  // master segments (at each of its optimizer steps, under PipeDream-2BW).
  std::string_view name() const override { return "pipeline shared parameters"; }
  void finish(const exec::Program& program) override;
  std::vector<optim::Segment> master_segments(std::span<const nn::Parameter* const>) override { return {}; }

 private:
  nn::ParameterStore& store_;
  dist::Communicator& pipeline_;
  exec::ParameterOwnership& ownership_;
  int rank_ = 0;
  std::vector<std::vector<int>> holders_;  // [parameter id]: the pipeline ranks whose units read it, ascending
};

}  // namespace tessera::parallel
