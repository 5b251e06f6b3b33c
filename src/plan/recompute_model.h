#pragma once
// Activation checkpointing as the runtime schedules it, for the planner: the chain of one model
// chunk's layers, the recompute policies' schedules over it and the exact simulator (src/memory).
// every_k and optimal take their activations and their recomputed forwards from here, so the
// planner predicts the schedule the runtime would run (src/exec/recompute.h builds the same kind of
// chain from the model's own tensors), not a formula of it.
//
// The chain of a chunk (L/(pp v) layers, one microbatch) depends on whose tensors are counted
// (Layout::activations):
//
// Engine (this engine's): exactly the runtime's chain (exec::stage_chain), from the unit bytes of
// config::unit_activation_bytes: unit i is block i with input = the previous unit's output, own =
// its kept tensors (less what selective drops), the selective rebuild as backward extra and the
// forward transients as forward extra; the last stage's chain ends with the head (a chunk of v > 1
// that does not hold it is taken to, a bound), the others with a boundary unit of no bytes where
// the last block's output is sent on, so that block is checkpointed like the others. The embedding's token ids are counted once per microbatch in flight on the first stage.
// Every policy takes its activations from this chain, as the runtime's prediction does: for one
// stage, (I - 1) R + P plus the token ids, exec::predict_activations to the byte.
//
// Megatron (Korthikanti et al.'s accounting): unit i is layer i, with
//   input_bytes  = x = e b s h (/ t with sp), the layer input,
//   own_bytes    = layer_activation_bytes(none) - x, everything else its backward reads,
//   output_bytes = the next layer's input,
// then a loss unit of zero bytes that closes the chain. The last layer's output counts as 0: on a
// stage that sends it on, it is the boundary tensor the comm tag counts; on the last stage it is
// the final norm's input, which the head's bytes count.
//
// Megatron's head stays out of the chain, as the closed forms keep it: its tensors (final norm and head
// inputs, fp32 probabilities) are added once on the last stage, and the embedding's dropout mask
// once per microbatch on the first. No policy reruns them (the runtime's chain ends with the head
// as its loss unit, which every schedule keeps whole), so putting them in the chain would change no
// schedule; keeping them out leaves none, selective and full exactly equal to their closed forms.
// A stage holding I chunk-microbatches peaks at (I - 1) R + P, R = simulate().after_forward_bytes
// and P = simulate().peak_bytes, as in the runtime (src/exec/recompute.h): each backward runs while
// the others wait at R. For the policies with closed forms this is exactly those forms: full gives
// R = n x and P = n x + (everything - x) for n layers, so I n x + (everything - x); none gives
// R = P = n everything; selective R = n kept and P = n kept + (everything - kept). Tests hold them
// equal.
//
// The optimal budget is per microbatch on a rank, like the runtime's: the chain gets
// activation_budget_mb less the stage's embedding and head bytes. With v > 1 it bounds each
// chunk-microbatch's peak plus those bytes.
#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "memory/chain.h"
#include "plan/layout.h"

namespace tessera::plan {

// every_k and optimal: memory and recompute come from a schedule over the chain. none, selective
// and full keep their closed forms (which the chain reproduces exactly).
bool recompute_uses_chain(config::RecomputePolicy r);

// every_k's segment length: recompute_every, or ceil(sqrt(layers of a model chunk)) when 0.
int resolved_recompute_every(const config::ModelConfig& m, const Layout& l);

// One model chunk's chain of `stage` for a microbatch of l.micro_batch sequences, in the layout's
// accounting (above). With selective, each layer keeps the selective set and allocates what it
// drops again during its backward.
std::vector<memory::ChainUnit> chunk_chain(const config::ModelConfig& m, const Layout& l, int stage);

// Bytes one microbatch keeps on `stage` outside the chain: the embedding's token ids (engine) or
// dropout mask (Megatron, with dropout) on the first stage, and Megatron's head tensors on the
// last (0 for the engine, whose head is in the chain).
double embedding_activation_bytes(const config::ModelConfig& m, const Layout& l);
double head_activation_bytes(const config::ModelConfig& m, const Layout& l);
double stage_edge_bytes(const config::ModelConfig& m, const Layout& l, int stage);

struct ChunkRecompute {
  std::vector<memory::ChainUnit> chain;
  memory::ChainSchedule schedule;
  memory::ChainSimulation simulation;  // R = after_forward_bytes, P = peak_bytes, recomputed_forwards
  int every_k = 0;                     // the segment length used (every_k)
  int64_t budget_bytes = 0;            // optimal and dtr: the chain's share of the budget
};

// The schedule l.recompute gives one chunk of `stage` and its simulation. Every policy has one
// (none, selective and full too). Optimal and dtr throw, naming minimum_activation_budget_mb, when
// the budget is below it.
ChunkRecompute chunk_recompute(const config::ModelConfig& m, const Layout& l, int stage);

// The least activation_budget_mb that recompute=optimal (or dtr) accepts for this model and layout,
// in MiB, rounded up to 1/100 MiB: the chain's least peak (memory::minimum_budget; for dtr the least
// budget DTR meets, memory::dtr_minimum_budget) plus the larger of the first and last stages'
// embedding and head bytes, since every rank runs with the one budget.
double minimum_activation_budget_mb(const config::ModelConfig& m, const Layout& l);

// Layer forwards `stage` reruns per microbatch over all its chunks: L/pp for full, what the
// schedule reruns for every_k and optimal, 0 for none and selective (selective reruns part of each
// layer, which the layer's own costs count).
double recomputed_layer_forwards(const config::ModelConfig& m, const Layout& l, int stage);
// The layers kept selectively whose backward rebuilds their norms' and activation's outputs, per
// microbatch on a rank of `stage` (a chain schedule's Keep::Selective; 0 for policies without one).
double rebuilt_layers(const config::ModelConfig& m, const Layout& l, int stage);
// Both of the above from one schedule (the stage's time needs both; a checkmate schedule costs a
// Rotor and a DTR run).
struct StageRecomputation {
  double layer_forwards = 0;
  double rebuilt_layers = 0;
};
StageRecomputation stage_recomputation(const config::ModelConfig& m, const Layout& l, int stage);
// Summed over all pp stages: the layer forwards the whole model reruns per sequence (L for full).
double model_recomputed_layer_forwards(const config::ModelConfig& m, const Layout& l);

}  // namespace tessera::plan
