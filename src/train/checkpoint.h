#pragma once
// Checkpoints: a folder per save (checkpoints/step_00000100/) holding
//   model.safetensors      parameters by name (f32)
//   optimizer.safetensors  AdamW moments by name ("m.<name>", "v.<name>") (without ZeRO)
//   zero_shard.rank<r>.safetensors
//                          with ZeRO (parallel.zero_stage >= 1): rank r's shard of the AdamW
//                          moments ("m", "v": the flat range [begin, end) named in its metadata)
//   tokenizer.model        the tokenizer, so a checkpoint samples on its own
//   manifest.json          format version, resolved config, step, data position, RNG seed,
//                          optimizer step count, and the size and xxh64 checksum of every file
// A save is atomic: everything is written into a hidden temporary folder, synced, and renamed into
// place; the `latest` pointer is replaced last; older checkpoints beyond `keep` are deleted only
// after the new one is complete. A crash at any moment leaves the previous checkpoint loadable.
//
// Data parallelism: every rank of the data-parallel group calls save() and load_checkpoint() with
// the group's communicator. Rank 0 names the temporary folder; each rank writes its own shard file
// into it; after a barrier rank 0 alone checksums everything, writes the manifest and renames the
// folder into place; a last barrier keeps every rank until the checkpoint is complete. Rank 0 also
// writes model.safetensors: the whole parameters (with ZeRO-3 the caller gathers them first).
// A checkpoint loads on the layout it was saved with (same dp and ZeRO stage); another layout
// gets an error saying so (resharding is not supported yet).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "nn/parameters.h"
#include "optim/optimizer.h"
#include "train/run_config.h"

namespace tessera::train {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointState {
  int64_t step = 0;               // optimizer steps completed
  nlohmann::json data_position;   // the loader's resumable position
  uint64_t seed = 0;
  std::vector<double> val_history;  // not needed for exactness; keeps the chart continuous
};

// What a checkpoint reads and writes of a rank's model and optimizer.
struct ModelState {
  const nn::ParameterStore& params;   // names, shapes and flat offsets
  nn::ParameterAccess& values;        // every parameter's value (ZeRO-3: gathered for the occasion)
  optim::Optimizer* optimizer = nullptr;  // null: parameters only
  // The flat elements whose optimizer state this rank holds (all of them without ZeRO), laid out
  // in flat order in the optimizer's state tensors.
  nn::ParamRange owned;
};

class CheckpointStore {
 public:
  CheckpointStore(std::string dir, int keep);

  // Saves and returns the checkpoint folder. `comm`: the data-parallel group (collective), or null.
  std::string save(const RunConfig& config, const CheckpointState& state, const ModelState& model,
                   const std::string& tokenizer_path, dist::Communicator* comm = nullptr) const;
  // The folder `latest` points to, if any.
  std::optional<std::string> latest() const;
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
};

// Verifies checksums, that the checkpoint's model equals `config.model` (an error lists the
// differing keys) and that it was saved with the same dp and ZeRO stage, then loads parameters
// and optimizer state (this rank's shard of it, with ZeRO) in place.
LoadedCheckpoint load_checkpoint(const std::string& path, const RunConfig& config, const ModelState& model,
                                 dist::Communicator* comm = nullptr);
// Reads and verifies only the manifest (for `tessera sample`, which builds the model from it).
nlohmann::json read_checkpoint_manifest(const std::string& path);

// The checkpoint folder a path names: a step folder (it holds manifest.json), a checkpoints/
// folder (the step its `latest` names, else its newest complete step) or a run folder (the same
// in its checkpoints/). Throws naming the path and what to give instead.
std::string resolve_checkpoint(const std::string& path);

// A checkpoint's weights alone, into a model of the same shape: no optimizer state, step, data
// position or seed (`train.init_from` starts a new run from them; `tessera sample` and `export`
// read them). model.safetensors holds the whole parameters whatever the layout that saved it, so
// any layout loads them. A model of another shape is refused, listing the differing keys; another
// vocabulary size also names the fix (prepare the data with the checkpoint's tokenizer).
struct LoadedWeights {
  std::string path;            // the resolved step folder
  std::string tokenizer_path;  // its tokenizer.model, or "" when it has none
  nlohmann::json manifest;
};
LoadedWeights load_weights(const std::string& checkpoint, const config::ModelConfig& model, const ModelState& state);

// xxh64 of a whole file.
uint64_t file_checksum(const std::string& path);

}  // namespace tessera::train
