#pragma once
// The optimizer state of a checkpoint, independent of the layout that saved it (checkpoint format
// 3), in the spirit of PyTorch's distributed checkpoints: every rank writes the elements it alone
// holds, each with its place in the one-process tensor, and a rank of any other layout picks out
// the elements of its own master segments. So dp, the ZeRO stage, tp, pp, the virtual stages and ep
// may all change between a save and a resume.
//
// optimizer.rank<r>.safetensors (world rank r) holds, for every parameter whose elements rank r
// writes (ModelState::writes_master: exactly one rank writes each element of the model):
//   "runs.<param>"     I32 [n, 2]: (first element, length) of each run of elements, as indices of
//                      the one-process parameter (row-major, without padding rows), in data order
//   "<state>.<param>"  [elements]: the state tensor's values there ("m.<param>", "v.<param>" for
//                      AdamW, "momentum.<param>" for SGD ...), in the dtype the optimizer keeps it
// and, under PipeDream-2BW, "previous_runs.<param>" and "previous.<param>": the previous weight
// version, likewise (ModelState::writes_previous).
//
// State that is not one value per element (Adafactor's factored statistics, adam8bit's per-block
// codes and scales) follows the shards of the layout that saved it, so it cannot move: such an
// optimizer's tensors are written as it holds them ("raw.<state>") with a fingerprint of the rank's
// segments, and a rank loads them from a file of the same fingerprint; any other layout is refused
// with the layout to resume on.
#include <string>

#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/checkpoint_manifest.h"

namespace tessera::train {

// Whether `state` is one value per owned element throughout (then it moves between layouts).
bool state_moves_between_layouts(const optim::StateDict& state);

// Writes this rank's file `path` of a format-3 checkpoint.
void write_optimizer_shard(const std::string& path, const ModelState& model, int rank, int ranks);

// Loads this rank's optimizer state (with the manifest's step count) and, when the model keeps one,
// its previous weight version, from the shard files of the checkpoint at `path`. An offloaded
// optimizer whose state is one value per element is loaded chunk by chunk into the nvme tier
// (optim::OffloadedOptimizer::load_chunk_by_chunk), so a state larger than RAM can be resumed;
// any other is loaded whole, through its state dict. `saved_layout` and `this_layout` describe the
// two layouts for the error that refuses a move. Returns whether the state was loaded chunk by chunk.
bool load_optimizer_shards(const std::string& path, const CheckpointManifest& manifest, const ModelState& model,
                           const std::string& saved_layout, const std::string& this_layout);

}  // namespace tessera::train
