#pragma once
// Checkpoints: a folder per save (checkpoints/step_00000100/) holding
//   model.safetensors      parameters by name (f32)
//   optimizer.safetensors  AdamW moments by name ("m.<name>", "v.<name>")
//   tokenizer.model        the tokenizer, so a checkpoint samples on its own
//   manifest.json          format version, resolved config, step, data position, RNG seed,
//                          optimizer step count, and the size and xxh64 checksum of every file
// A save is atomic: everything is written into a hidden temporary folder, synced, and renamed into
// place; the `latest` pointer is replaced last; older checkpoints beyond `keep` are deleted only
// after the new one is complete. A crash at any moment leaves the previous checkpoint loadable.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/parameters.h"
#include "optim/adamw.h"
#include "train/run_config.h"

namespace tessera::train {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointState {
  int64_t step = 0;               // optimizer steps completed
  nlohmann::json data_position;   // the loader's resumable position
  uint64_t seed = 0;
  std::vector<double> val_history;  // not needed for exactness; keeps the chart continuous
};

class CheckpointStore {
 public:
  CheckpointStore(std::string dir, int keep);

  // Saves and returns the checkpoint folder.
  std::string save(const RunConfig& config, const CheckpointState& state, const nn::ParameterStore& params,
                   const optim::AdamW& optimizer, const std::string& tokenizer_path) const;
  // The folder `latest` points to, if any.
  std::optional<std::string> latest() const;
  const std::string& dir() const { return dir_; }

 private:
  void apply_retention(const std::string& keep_path) const;
  std::string dir_;
  int keep_;
};

struct LoadedCheckpoint {
  std::string path;
  CheckpointState state;
  std::string config_toml;
};

// Verifies checksums and that the checkpoint's model equals `config.model` (an error lists the
// differing keys), then loads parameters and optimizer state in place.
LoadedCheckpoint load_checkpoint(const std::string& path, const RunConfig& config, nn::ParameterStore& params,
                                 optim::AdamW* optimizer);
// Reads and verifies only the manifest (for `tessera sample`, which builds the model from it).
nlohmann::json read_checkpoint_manifest(const std::string& path);

// xxh64 of a whole file.
uint64_t file_checksum(const std::string& path);

}  // namespace tessera::train
