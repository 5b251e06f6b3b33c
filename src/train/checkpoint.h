#pragma once
// Checkpoints: a folder per save (checkpoints/step_00000100/) holding
//   model.safetensors      parameters by name (f32), whole whatever the layout: what `tessera
//                          sample`, `export` and train.init_from read
//   optimizer.rank<r>.safetensors
//                          world rank r's part of the optimizer state (and of PipeDream-2BW's
//                          previous weight version), each element with its place in the
//                          one-process tensor, so any layout resumes from any other
//                          (train/optimizer_shards.h)
//   compression.rank<r>.safetensors
//                          with parallel.compression or 1-bit Adam: rank r's error feedback
//   tokenizer.model        the tokenizer, so a checkpoint samples on its own
//   manifest.json          format version, resolved config, step, data position, RNG seed,
//                          optimizer step count, elapsed time, the layout, the size and XXH3
//                          checksum of every file, and its own checksum (checkpoint_manifest.h)
// The data position is the global batch's (every layout reads the same batches) and dropout draws
// from counters of the global microbatch, so a resumed run of another layout continues the same
// sequence of steps.
//
// A save is atomic: everything is written into a hidden temporary folder, synced, and renamed into
// place; the `latest` pointer is replaced last; older checkpoints beyond `keep` are deleted only
// after the new one is complete. A crash at any moment leaves the previous checkpoint loadable, and
// a save that fails (disk full, read-only folder) throws after removing its temporary folder,
// leaving every complete checkpoint as it was.
//
// Every rank calls save() and load_checkpoint() with the world's communicator. Rank 0 names the
// temporary folder; each rank writes its own shard file into it (in parallel); after a barrier rank
// 0 alone checksums everything, writes the manifest and renames the folder into place; a last
// barrier keeps every rank until the checkpoint is complete. Rank 0 also writes model.safetensors:
// the whole parameters, gathered from the tensor- and expert-parallel blocks (with ZeRO-3 the caller
// gathers them first, or reads them one at a time from the nvme tier: over several ranks each is
// all-gathered as rank 0 writes it, the other ranks taking part in the same order). A load writes
// the parameters one at a time through ModelState::sink and an offloaded optimizer's state chunk
// by chunk, so a run whose state is larger than RAM resumes. Checkpoints of formats 1 and 2
// (optimizer state in files per layout) load on the layout that saved them.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "nn/parameters.h"
#include "optim/optimizer.h"
#include "parallel/compression/compressor.h"
#include "train/checkpoint_manifest.h"
#include "train/run_config.h"

namespace tessera::train {

// What a checkpoint reads and writes of a rank's model and optimizer.
struct ModelState {
  ModelState(const nn::ParameterStore& store, nn::ParameterAccess& access, optim::Optimizer* state_owner = nullptr,
             std::vector<nn::ParamRange> owned_ranges = {})
      : params(store), values(access), optimizer(state_owner), owned(std::move(owned_ranges)) {}

  const nn::ParameterStore& params;   // names, shapes and flat offsets
  nn::ParameterAccess& values;        // every parameter's value (ZeRO-3: gathered for the occasion)
  // Each values.weight(p) of a save is a collective of the data-parallel group (ZeRO-3's shard in
  // the nvme tier over several ranks, gathered one parameter at a time): every rank asks for every
  // parameter once, in store order, the rank that writes the model file as it writes it.
  bool values_read_together = false;
  // Where a load writes the parameters, one at a time (parallel::DataParallel::WritableParameters,
  // which may hold no more than the parameter being written); null: into the tensors `values`
  // answers, which must be the values themselves.
  nn::ParameterSink* sink = nullptr;
  optim::Optimizer* optimizer = nullptr;  // null: parameters only
  // The flat elements whose optimizer state this rank holds (all of them without ZeRO; under
  // pipelining its stages' parameters, or its shard of them), laid out in flat order in the
  // optimizer's state tensors.
  std::vector<nn::ParamRange> owned;
  // Under pipeline parallelism (pipeline_rank >= 0) without ZeRO: the parameters of this rank's
  // stages, whose moments follow each other in store order in the optimizer's state tensors. One
  // rank of each stage's data-parallel group (writes_stage) saves them to the stage's own file.
  // With ZeRO every rank saves its shard, as without pipelining.
  int pipeline_rank = -1;
  // State of this rank's own (a gradient compressor's, 1-bit Adam's errors), saved and loaded by
  // every rank.
  parallel::RankLocalState* rank_state = nullptr;
  std::vector<const nn::Parameter*> stage_params;
  bool writes_stage = false;
  // PipeDream-2BW: this rank's previous weight version, parameter by parameter (views of the
  // stash, [the parameter's shape]): saved by one rank of each stage's data-parallel group
  // (writes_previous_weights) and loaded back into the views. Empty: the schedule keeps none.
  std::vector<std::pair<const nn::Parameter*, Tensor>> previous_weights;
  int previous_weights_rank = 0;  // the pipeline rank they belong to (0 without pipelining)
  bool writes_previous_weights = false;
  // Under tensor parallelism: the group, over which this rank's blocks of the parameters are
  // gathered into whole tensors for model.safetensors (and cut back out on load); the optimizer
  // state and the previous weight version are files per tensor-parallel rank, written (without
  // ZeRO) by one rank of each data-parallel group (writes_stage).
  dist::Communicator* tensor_parallel = nullptr;
  int tensor_parallel_rank() const { return tensor_parallel ? tensor_parallel->rank() : -1; }
  // Under expert parallelism: the group over which the expert stacks are gathered for
  // model.safetensors.
  dist::Communicator* expert_parallel = nullptr;
  // Format 3 (train/optimizer_shards.h): this rank's master segments in its optimizer's state order
  // (empty: those of `owned`), and per parameter id whether this rank writes its master elements
  // and its previous weight version (empty: every one), so that exactly one rank writes each
  // element (parallel::TrainingEngine::writes_checkpoint_of).
  std::vector<optim::Segment> segments;
  std::vector<bool> writes_master;
  std::vector<bool> writes_previous;
  std::vector<optim::Segment> master_segments() const;
};

class CheckpointStore {
 public:
  CheckpointStore(std::string dir, int keep);

  // Saves and returns the checkpoint folder. `comm`: the data-parallel group (collective), or null.
  std::string save(const RunConfig& config, const CheckpointState& state, const ModelState& model,
                   const std::string& tokenizer_path, dist::Communicator* comm = nullptr) const;
  // The folder `latest` points to, if any.
  std::optional<std::string> latest() const;
  // The folder `latest` points to when it is complete; else the newest complete checkpoint, with
  // `note` saying so; nullopt when the folder holds no complete checkpoint.
  std::optional<std::string> latest_complete(std::string* note) const;
  const std::string& dir() const { return dir_; }

 private:
  void apply_retention(const std::string& keep_path) const;
  void finalize(const std::string& tmp, const std::string& final_path, const std::string& name,
                const nlohmann::json& manifest) const;
  std::string dir_;
  int keep_;
};

struct LoadedCheckpoint {
  std::string path;
  CheckpointState state;
  std::string config_toml;
  // What of the checkpoint this run does not use (e.g. a compressor's unsent error when the run
  // reduces densely), for the log; empty when it uses everything.
  std::string unused;
  // How a state in the nvme tier was loaded, for the log: the parameters one at a time (set by the
  // caller, who chose the sink) and the optimizer state chunk by chunk; neither held whole.
  bool parameters_one_at_a_time = false;
  bool optimizer_chunk_by_chunk = false;
};

// Verifies checksums and that the checkpoint's model equals `config.model` (an error lists the
// differing keys), then loads the parameters and this rank's part of the optimizer state in place,
// from a checkpoint of any layout (format 3; formats 1 and 2 need the layout that saved them).
// State that cannot move (per-block or factored optimizer statistics, per-rank error feedback) is
// refused on another layout, naming the layout to resume on.
LoadedCheckpoint load_checkpoint(const std::string& path, const RunConfig& config, const ModelState& model,
                                 dist::Communicator* comm = nullptr);
// Reads and checks the manifest (every field, its own checksum) and the size and checksum of every
// file it lists (for `tessera sample`, which builds the model from it).
CheckpointManifest read_checkpoint_manifest(const std::string& path);
// The run config a checkpoint was saved with (its manifest's "config").
RunConfig checkpoint_run_config(const CheckpointManifest& manifest, const std::string& path);

// The checkpoint folder `given` names: "latest" (the newest complete checkpoint of
// `run_checkpoints_dir`), a run folder (holding checkpoints/), a checkpoints folder (its newest
// complete checkpoint) or a checkpoint folder itself. When `latest` is missing or points at a
// folder that is gone or incomplete, the newest complete checkpoint is used and `note` (if given)
// says so; otherwise `note` is left empty. A name that leads to no checkpoint is an error saying why.
std::string resolve_checkpoint(const std::string& given, const std::string& run_checkpoints_dir,
                               std::string* note = nullptr);

// A checkpoint's weights alone, into a model of the same shape: no optimizer state, step, data
// position or seed (`train.init_from` starts a new run from them; `tessera sample` and `export`
// read them). model.safetensors holds the whole parameters whatever the layout that saved it, so
// any layout loads them. A model of another shape is refused, listing the differing keys; another
// vocabulary size also names the fix (prepare the data with the checkpoint's tokenizer). A folder
// in the Hugging Face layout (train/hf_import.h) is read the same way, with the same refusals.
struct LoadedWeights {
  std::string path;            // the resolved step folder
  std::string tokenizer_path;  // its tokenizer.model, or "" when it has none
  std::string note;            // how the path was resolved, when not as named (resolve_checkpoint's note)
  CheckpointManifest manifest;  // empty for a Hugging Face folder
};
LoadedWeights load_weights(const std::string& checkpoint, const config::ModelConfig& model, const ModelState& state);

// Sets this rank's part of parameter `p` from its whole value (`whole`: contiguous f32 [the
// one-process shape]): all of it, or under tensor parallelism its block, with zero padding rows.
// Writes through the model's sink (ModelState::sink).
void set_parameter_from_whole(const ModelState& model, const nn::Parameter& p, const Tensor& whole);

// XXH3-64 of a whole file.
uint64_t file_checksum(const std::string& path);

}  // namespace tessera::train
