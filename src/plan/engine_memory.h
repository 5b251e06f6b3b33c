#pragma once
// This engine's memory, tag by tag, as its allocator measures it (Layout::states = engine): what
// `tessera plan --config` predicts for a run, and tests hold against the peaks in metrics.jsonl.
//
//   params          every rank holds the f32 values of the whole model at its tensor-parallel rank
//                   (pipeline stages included: a stage reads its own, the store holds them all);
//                   ZeRO-3 keeps only this rank's 1/dp of them (under a pipeline, of its stage's)
//   grads           likewise f32 for the whole model; ZeRO-2/3 keep this rank's 1/dp of its stage's
//   optimizer       the optimizer's state (Adam: m and v, 8 bytes) over the parameters this rank
//                   updates: its stage's (a tied table on both of its stages), 1/dp of them under
//                   ZeRO-1/2/3. There is no separate master copy: the f32 values are the master.
//   activations     the engine activation accounting (memory_model.h)
//   comm            ZeRO-2/3's gradient buckets while they fill and while they are reduced, and
//                   ZeRO-3's gathered units (the one running and the next, prefetched; under a
//                   pipeline every unit of the stage, kept across the microbatches); a pipeline
//                   stage's sent boundary tensors, which live until a later unit action finds their
//                   transfer done: a bound of two under 1F1B (the last one and the one before), of
//                   every microbatch's under GPipe; a run holds one or two. Plain data
//                   parallelism and ZeRO-1 reduce in place in the gradients; tensor parallelism
//                   reduces in place in the activations.
//   workspace       the largest of the stage's units' peaks (config/workspace_bytes.h), with a
//                   gradient receive posted ahead on stages that receive gradients
//   weight_stash    0: the cost model does not describe PipeDream-2BW
//   working_copies  mixed precision's 16-bit copies of the weights this rank reads: kept for the
//                   step (all of its stage's), or under ZeRO-3 made per unit action
#include <vector>

#include "config/model_config.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/pipeline_model.h"

namespace tessera::plan {

MemoryBreakdown engine_stage_memory(const config::ModelConfig& m, const Layout& l, int stage,
                                    const PipelineModel& pipeline);

// The elements whose master copy stage `stage`'s rank updates: its stage's parameters, 1/dp of them
// under ZeRO (the experts' 1/(dp / ep)). A delayed update (parallel/delayed_update.h) keeps two
// more f32 copies of them.
double engine_optimizer_elements(const config::ModelConfig& m, const Layout& l, int stage);

// The elements of the gradient bucket the runtime reduces last in a step of one stage (pp = 1): the
// one that backward's last action (the embedding's) completes, posted when backward ends.
double engine_last_bucket_elements(const config::ModelConfig& m, const Layout& l);
// How many units run their backward before the first gradient bucket of a step of one stage (pp = 1)
// is complete, counted from the last unit down, the one completing it included: the runtime posts
// no reduction before then. All of them where the whole gradient is one bucket.
int engine_units_before_first_bucket(const config::ModelConfig& m, const Layout& l);
// The largest gradient bucket, in elements (one pipeline stage).
double engine_largest_bucket_elements(const config::ModelConfig& m, const Layout& l);

// ZeRO-2/3's comm tag on stage `stage`'s rank: the peak of the bucket storage and gathered units
// live at once, walking the unit actions with the runtime's rules (parallel/gradient_reducer.h,
// parallel/parameter_gatherer.h). A bucket's storage is freed only when a later one is opened
// while kMaxInFlight = 2 are in flight, or at the end of the step; buckets the communicator
// finished early can be freed sooner, so this is the peak of a run whose reductions are not yet
// done when the next bucket opens: an upper bound, and what these runs measure. Under a pipeline
// the walk covers the stage's units (a tied table as the head's piece), and ZeRO-3 holds every unit
// of the stage gathered all step (kept across the microbatches, as the runtime does): the cost of
// composing ZeRO-3 with pipelining is the stage's whole f32 parameters in comm during the step.
double engine_zero_comm_bytes(const config::ModelConfig& m, const Layout& l, int stage = 0);

// The elements ZeRO-3 gathers in one step (pp = 1): each run of consecutive actions on one unit
// gathers the ranges the unit reads once (parallel::ParameterGatherer), so a unit's parameters come
// once for its forward and once for its backward per microbatch, and a tied head reads the token
// embedding again. With memory.offload_params a rank reads its 1/dp of them from the nvme tier.
double engine_zero3_gathered_elements(const config::ModelConfig& m, const Layout& l);

// The same walk, action by action: the bytes the comm tag holds while each unit action of the
// step runs (a forward or a backward of a unit for a microbatch), for the memory peak of every
// tag at once.
struct ZeroCommAction {
  int unit = 0;
  int microbatch = 0;
  bool backward = false;
  double bytes = 0;
};
std::vector<ZeroCommAction> engine_zero_comm_walk(const config::ModelConfig& m, const Layout& l, int stage = 0);

}  // namespace tessera::plan
