#pragma once
// The one config of a run: a TOML file with sections model, data, train, optim, parallel,
// checkpoint and log, plus dotted command-line overrides (--train.steps 100). Unknown keys are
// rejected with a "did you mean", wrong types and out-of-range values name the key, and the
// resolved config is written into the run folder and every checkpoint.
// Sections: model, data, train, optim, parallel, compression, precision, memory, checkpoint, log.
// Each key is declared once, in train/config_keys.h, which the reader and the writer follow.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "config/parallel_layout.h"
#include "optim/optimizer_config.h"
#include "config/compatibility.h"
#include "config/compression_method.h"
#include "config/precision.h"
#include "config/recompute_policy.h"

namespace tessera::train {

struct DataSection {
  std::string dir = "data/kjv";  // holds train.bin, val.bin, tokenizer.model (tessera data prepare)
};

struct TrainSection {
  int64_t steps = 1000;
  int64_t exit_after = 0;     // stop (with a checkpoint) after this many steps in this process; 0: run to the end
  float max_minutes = 0;      // stop (with a checkpoint) after this many minutes in this process; 0: no limit
  bool overwrite = false;     // start over in a run folder that holds an earlier run (deletes its checkpoints)
  bool allow_changes = false; // resume with settings that change the optimization (learning rate, schedule length, ...)
  int batch_size = 16;        // sequences per optimizer step, over all data-parallel ranks
  int micro_batch_size = 16;  // sequences per forward/backward on one rank
  uint64_t seed = 1337;
  std::string out_dir = "runs/default";
  int eval_every = 100;       // 0: only at the end
  int eval_batches = 8;
  int sample_every = 0;       // 0: only at the end
  int sample_tokens = 200;
  float sample_temperature = 0.8f;
  int sample_top_k = 40;
  std::string sample_prompt;
  // A checkpoint (step folder, checkpoints/ folder or run folder) or a Hugging Face folder
  // (train/hf_import.h) whose weights start this run, and nothing else of it: step 0, a fresh
  // optimizer state and data order, this run's seed. "": none.
  std::string init_from;
};

// The optimizer (optim::OptimizerConfig: its fields and which optimizer reads each) and the
// learning-rate schedule and clipping, which every optimizer shares.
struct OptimSection : optim::OptimizerConfig {
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  int64_t warmup_steps = 100;
  float grad_clip = 1.0f;  // 0: no clipping
  // ZeRO-Offload's delayed parameter update from this step on: each step's update runs while the
  // next step computes on the weights before it (parallel/delayed_update.h). 0: off.
  int64_t delayed_update_after = 0;
  // Those steps compute on the weights extrapolated by the last update's change (SpecTrain), not on
  // the stale ones.
  bool delayed_update_extrapolate = false;
};

struct ParallelSection {
  int dp = 1;                       // data-parallel ranks; the world size must equal dp × tp × pp
  int tp = 1;                       // tensor-parallel ranks: heads, MLP width and vocabulary split (Megatron)
  bool sp = false;                  // sequence parallelism over the tensor-parallel ranks
  // Expert-parallel ranks, carved out of dp (it divides dp and model.moe_experts): each holds
  // E / ep experts of every MoE layer; their gradients are reduced over the dp / ep ranks that hold
  // the same experts (edp).
  int ep = 1;
  int pp = 1;                       // pipeline ranks: the model's layers split into consecutive stages
  // Blocks per stage, first stage first (pp × virtual_stages entries); empty: balanced by the
  // cost model's per-unit time.
  std::vector<int64_t> stage_layers;
  int zero_stage = 0;               // 0: plain data parallel; 1, 2, 3: ZeRO (optimizer, + gradients, + parameters sharded)
  // The order of microbatches' forwards and backwards on each rank (parallel.schedule).
  config::ScheduleKind schedule = config::ScheduleKind::OneFOneB;
  int virtual_stages = 1;           // model chunks per rank (the interleaved schedule)
  // 2bw: the weight version a microbatch reads on a stage: "newest" (stale only where the pipeline
  // forces it) or "delayed" (all of batch b reads version b - 1); pipeline/generators.h.
  std::string weight_version = "newest";
  float bucket_mb = 25.0f;          // gradient bucket size (MiB): reduced as soon as backward completes one
  float timeout_seconds = 600.0f;   // a collective taking longer aborts the job (the watchdog)
  // How gradient buckets are reduced (parallel.compression): none, topk, qsgd, onebit, powersgd.
  config::CompressionMethod compression = config::CompressionMethod::None;
  std::string grad_dtype = "fp32";  // dtype of the gradient reduction's messages (fp32, bf16, fp16), summed in f32
};

// The keys of the gradient compressor chosen by parallel.compression; 0 is the method's default,
// and a key the method does not read is refused.
struct CompressionSection {
  double ratio = 0;           // topk: fraction of each bucket's elements sent (0: 0.01)
  int levels = 0;             // qsgd: quantization levels, 1 to 127 (0: 127)
  int rank = 0;               // powersgd: rank of each matrix's approximation (0: 4)
  int64_t warmup_steps = 0;   // steps reduced exactly before compression starts
};

// Mixed precision (config/precision.h). The loss-scaling keys are read by compute = "fp16" only.
struct PrecisionSection {
  std::string compute = "fp32";         // GEMM inputs, saved activations and their gradients: fp32, bf16, fp16
  std::string loss_scale = "dynamic";   // fp16: "dynamic", or a fixed scale (a number)
  double init_scale = 65536.0;          // fp16, dynamic: the first scale
  int64_t growth_interval = 2000;       // fp16, dynamic: finite steps in a row before the scale grows
  double growth_factor = 2.0;           // fp16, dynamic: the scale's growth
  double backoff_factor = 0.5;          // fp16, dynamic: the scale's cut after a non-finite gradient
  config::FloatGemmSetting f32_gemm = config::FloatGemmSetting::Auto;  // the float products' library
};

struct MemorySection {
  // memory.recompute: none, full, every_k, selective, optimal, dtr, checkmate.
  config::RecomputePolicy recompute = config::RecomputePolicy::None;
  int recompute_every = 0;          // every_k: blocks per segment; 0: ⌈√n⌉ for a stage of n blocks
  float activation_budget_mb = 0;   // optimal, dtr, checkmate: the activation peak allowed per microbatch (MiB)
  double solver_seconds = 60;       // checkmate: CBC's time limit for each stage's solve (s)
  std::string offload_activations = "none";  // none, nvme: where kept activations wait for their backward
  std::string activation_encoding = "none";  // none, lossless, gist, fp8: the form they wait in
  std::string offload_optimizer = "none";    // none, nvme: where the optimizer's state lives between steps
  std::string offload_params = "none";       // none, nvme: where ZeRO-3's parameter shard lives between its uses
  float offload_chunk_mb = 64;      // offloaded optimizer state moves in chunks of about this much
  std::string offload_dir;          // the nvme tier's folder; "": <train.out_dir>/offload
  float ram_budget_mb = 0;          // what a process may hold in RAM (MiB); 0: the memory the machine has available
  bool offloads() const {
    return offload_activations != "none" || offload_optimizer != "none" || offload_params != "none";
  }
};

struct CheckpointSection {
  int64_t every = 0;    // 0: only at the end
  // false: a run that trains all its steps writes no checkpoint at its end (a stop still does, to be
  // resumed): benchmarks and throwaway runs of models whose checkpoint would not fit the disk.
  bool at_end = true;
  int keep = 3;         // newest checkpoints kept; older ones are deleted after a successful save
  std::string resume;   // "", "latest", "auto" (latest if there is one, else a fresh start), or a checkpoint folder
};

struct LogSection {
  int every = 10;
  std::string progress = "auto";  // auto (bar on a terminal), bar, plain
  float peak_gflops = 0;          // matmul peak of one process for MFU; 0: calibrated once per machine and stored
  bool timeline = false;          // write timeline.json: when each instruction of one step ran on each pipeline rank
  bool profile = false;           // time steps 2-4 by op category and phase: a table, profile.txt and trace.json
};

struct RunConfig {
  config::ModelConfig model;
  bool vocab_from_data = true;  // model.vocab_size not given: the dataset's tokenizer decides it
  bool dp_from_world = false;   // parallel.dp not given: the job's processes over tp × pp decided it
  DataSection data;
  TrainSection train;
  OptimSection optim;
  ParallelSection parallel;
  CompressionSection compression;
  PrecisionSection precision;
  MemorySection memory;
  CheckpointSection checkpoint;
  LogSection log;

  // Gradient-accumulation microbatches per step on one rank.
  int accumulation_steps() const {
    return static_cast<int>(train.batch_size / (int64_t{train.micro_batch_size} * parallel.dp));
  }
  // The run's parallel layout, the one value the mesh, the schedule and the planner read (from
  // parallel.*, train.batch_size and train.micro_batch_size; pp = tp = ep = 1 for now).
  config::ParallelLayout layout() const;
  // The compressor's options (parallel.compression and compression.*), defaults filled in.
  config::CompressionOptions compression_options() const;
  // The settings the compatibility matrix reads (config/compatibility.h).
  config::FeatureSettings feature_settings() const;
  // precision.* and parallel.grad_dtype as the engine takes them.
  config::PrecisionOptions precision_options() const;
  // Cross-section checks (batch divisibility, ...); each message names the keys and the fix.
  void validate() const;
};

// Applies "a.b=value" overrides to a TOML table (values parsed as TOML; bare words as strings).
void apply_overrides(toml::table& table, const std::vector<std::pair<std::string, std::string>>& overrides);
// `world_size`: the processes of the job that reads the config (1 outside a launcher). When
// parallel.dp is left out and the job has several processes, dp is world_size / (tp × pp).
RunConfig read_run_config(const toml::table& table, int world_size = 1);
RunConfig load_run_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides,
                          int world_size = 1);
// The resolved config as TOML text (every key, defaults included): saved with runs and checkpoints.
std::string to_toml(const RunConfig& config);
// Every key of the schema, dotted ("train.steps"), in the order to_toml writes them.
std::vector<std::string> config_keys();

}  // namespace tessera::train
