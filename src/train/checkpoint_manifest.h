#pragma once
// The manifest of a checkpoint (manifest.json): what a checkpoint claims about itself, and the
// checks that make a damaged or hand-edited one a clear error instead of a run that resumes from
// nonsense. Kept apart from the saving and loading of tensors so that it parses from text alone
// (the fuzz target of tests/fuzz feeds it bytes).
//
// Format version 3 (written since the optimizer state moves between layouts):
//   {"format": "tessera-checkpoint", "version": 3, "step": 3, "seed": 1337,
//    "data_position": {loader state}, "val_history": [...], "elapsed_seconds": 12.5,
//    "model": {...}, "parameter_count": N, "optimizer": {"name": "adamw", "steps_taken": 3},
//    "parallel": {"dp": 2, "zero_stage": 1, "ranks": 8, "pp": 2, "tp": 2, "ep": 1},
//    "config": "<resolved TOML>",
//    "files": {"model.safetensors": {"bytes": N, "xxh3": "<16 hex digits>"}, ...},
//    "manifest_xxh3": "<16 hex digits>"}
// fp16 runs add "loss_scale": {"scale": 65536, "finite_steps": 12, "skipped_steps": 1}.
// manifest_xxh3 is the XXH3-64 of the canonical text of the manifest without that field (compact
// JSON with sorted keys, nlohmann's dump()): it is checked before anything else, so an edited
// manifest is refused as modified rather than believed. Version 3 lists one optimizer shard file
// per rank (train/optimizer_shards.h); version 2 (the same manifest, with the optimizer state in
// files per layout: optimizer.safetensors, zero_shard.rank<r>, optimizer.pipeline<p>.tp<t>) and
// version 1 (no self-checksum, no elapsed_seconds) still load on the layout that saved them.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/loss_scaler.h"

namespace tessera::train {

inline constexpr int kCheckpointFormatVersion = 3;
// The oldest manifest version this tessera reads.
inline constexpr int kOldestCheckpointFormatVersion = 1;

// What the training loop saves besides tensors, and gets back on resume.
struct CheckpointState {
  int64_t step = 0;               // optimizer steps completed
  nlohmann::json data_position;   // the loader's resumable position
  uint64_t seed = 0;
  std::vector<double> val_history;  // not needed for exactness; keeps the chart continuous
  double elapsed_seconds = 0;     // wall time of the run up to this step, over every process that ran it
  // fp16's loss scale where it runs with one (memory/loss_scaler.h), so a resumed run scales the same.
  std::optional<memory::LossScaler::State> loss_scale;
  // Where the learning-rate schedule was continued with another length (optim::WarmupCosine's
  // restart): from this step on, a cosine from this rate. None while the schedule is the config's.
  struct LrRestart {
    int64_t step = 0;
    double rate = 0;
  };
  std::optional<LrRestart> lr_restart;
};

struct CheckpointFileEntry {
  uint64_t bytes = 0;
  std::string xxh3;  // 16 lowercase hex digits
};

// A manifest whose every field has been checked.
struct CheckpointManifest {
  int version = kCheckpointFormatVersion;
  CheckpointState state;
  nlohmann::json model;           // the model keys, each of its proper type
  int64_t parameter_count = 0;
  std::string optimizer_name;
  int64_t optimizer_steps = 0;    // <= state.step (skipped steps do not count)
  int dp = 1;
  int zero_stage = 0;
  int ranks = 1;
  int pp = 1;                     // pipeline ranks (absent before pipelining: 1)
  int tp = 1;                     // tensor-parallel ranks (absent before tensor parallelism: 1)
  int ep = 1;                     // expert-parallel ranks (absent before expert parallelism: 1)
  std::string config_toml;        // the resolved config of the run that saved it
  std::map<std::string, CheckpointFileEntry> files;
};

// Parses and checks manifest text. `source` names the manifest in messages; `folder_step` is the
// step the checkpoint folder's name says (step_00000003: 3), or nullopt when the folder is not
// named that way. Every problem is a tessera::Error naming the manifest and the field.
CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& source,
                                             std::optional<int64_t> folder_step);

// The manifest's text as written: `manifest` (without manifest_xxh3) plus its self-checksum.
std::string checkpoint_manifest_text(const nlohmann::json& manifest);

// The step named by a checkpoint folder called step_<digits>, or nullopt for any other name.
std::optional<int64_t> step_of_folder_name(std::string_view name);

// Format 3: world rank `rank`'s optimizer state (and 2BW's previous weights), by global element
// (train/optimizer_shards.h).
std::string optimizer_shard_file_name(int rank);
// Formats 1 and 2, still read: the per-rank ZeRO shard files and the fixed files of a checkpoint.
std::string zero_shard_file_name(int rank);
// The optimizer state of one pipeline rank's stages.
std::string pipeline_stage_file_name(int pipeline_rank);
// Without ZeRO, the optimizer state of the ranks at one pipeline rank and one tensor-parallel rank
// (-1: the layout does not split that way): optimizer.safetensors, optimizer.pipeline0001.safetensors,
// optimizer.tp0001.safetensors or optimizer.pipeline0001.tp0001.safetensors.
std::string optimizer_file_name(int pipeline_rank, int tensor_parallel_rank);
// A rank's gradient-compression state (error feedback, PowerSGD's Q), with parallel.compression.
std::string compression_state_file_name(int rank);
// PipeDream-2BW: the previous weight version of one pipeline rank's parameters (the next batch
// reads it), by parameter name.
// Under tensor parallelism each tensor-parallel rank's blocks have a file of their own (".tp0001").
std::string previous_weights_file_name(int pipeline_rank, int tensor_parallel_rank = -1);
inline constexpr const char* kCheckpointModelFile = "model.safetensors";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kCheckpointTokenizerFile = "tokenizer.model";
inline constexpr const char* kCheckpointManifestFile = "manifest.json";

}  // namespace tessera::train
