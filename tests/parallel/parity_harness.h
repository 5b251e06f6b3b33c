#pragma once
// Runs a tiny model for a few steps on synthetic global batches, either as the single-process
// reference (the whole global batch in one forward) or data-parallel with a ZeRO stage (each rank
// its rows of the same global batch, in microbatches), and records what the tests compare.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../common/rank_checks.h"
#include "config/model_config.h"
#include "dist/communicator.h"
#include "dist/mesh.h"
#include "exec/recompute.h"
#include "optim/optimizer_config.h"
#include "parallel/training_engine.h"

namespace tessera::testing {

struct ParityCase {
  std::string name;
  config::ModelConfig model;
  int zero_stage = 0;
  int micros = 1;         // microbatches per rank per step
  int global_batch = 8;   // sequences per step over all ranks
  int seq_len = 16;
  int64_t bucket_bytes = 1024;
  int steps = 5;
  float lr = 3e-3f;
  float grad_clip = 0.05f;  // small enough that clipping acts on these random batches
  uint64_t seed = 11;
  optim::OptimizerConfig optimizer;  // AdamW unless a test chooses another
  exec::RecomputeOptions recompute;  // how the data-parallel run recomputes (the reference never does)
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved)
  bool record_timeline = false;  // record the last step's timeline (RunRecord::spans and ::timeline)
  parallel::CompressionOptions compression;  // how the data-parallel run reduces its buckets
  bool sequence_parallel = false;  // with tensor parallelism: the residual stream split by sequence
  // Steps per engine call (TrainingEngine::train_batches), summing to `steps`; empty: one
  // train_step per step. Under PipeDream-2BW the pipeline drains between calls only.
  std::vector<int> steps_per_call;
  config::PrecisionOptions precision;  // of the parallel run (the reference is always fp32)
  // PipeDream-2BW's rule for the version a microbatch reads (pipeline/generators.h). The harness
  // runs the paper's uniform delay unless a case asks for the engine's default, the newest.
  pipeline::TwoBWVersions two_bw_versions = pipeline::TwoBWVersions::Delayed;
  // Blocks per pipeline stage; empty: the engine's balanced split.
  std::vector<int64_t> stage_layers;
  // ZeRO-Offload's delayed update from this step (EngineOptions::delayed_update_after; 0: off).
  int64_t delayed_update_after = 0;
};

struct StepRecord {
  double loss = 0;
  double grad_norm = 0;
  MemoryStats memory;       // right after the step, peaks since the step began
  dist::CommStats comm;     // counters' change over the step
  dist::CommStats tensor_comm;  // the same on the tensor-parallel group
  // Bytes sent during each microbatch's forward and backward (posted by the hooks).
  std::vector<uint64_t> micro_bytes;
  // Gradient reductions (all-reduce or reduce-scatter) posted so far in the last microbatch, right
  // after each unit's backward, by unit: proves they are posted during backward.
  std::vector<uint64_t> reductions_after_unit;
  // The activation peak the engine's plan predicts for the step.
  int64_t predicted_activations = 0;
  bool skipped = false;   // no update: the gradient was not finite
  double loss_scale = 1;  // the loss scale the step ran with (fp16)
  nn::MoeStatistics moe;    // the MoE layers' routing, summed over the data-parallel group
  dist::CommStats expert_comm;  // counters' change over the step on the expert-parallel group
};

struct RunRecord {
  std::vector<StepRecord> steps;
  std::vector<float> params;  // all parameters at the end, flat order
  int64_t numel = 0;
  int64_t shard = 0;           // this rank's shard size
  int64_t domain = 0;          // elements its data-parallel group reduces (its stages' under pipelining)
  size_t domain_pieces = 0;    // contiguous ranges of them
  int64_t master = 0;          // elements whose master copy this rank's optimizer updates
  size_t comm_bound = 0;       // the engine's bound on transient 'comm' bytes
  size_t buckets = 0;
  size_t weight_stash_bytes = 0;      // live under MemoryTag::WeightStash after the engine was built
  size_t optimizer_param_bytes = 0;   // f32 bytes of the parameters this rank's optimizer updates (ZeRO 0)
  std::vector<int> program_units;  // the unit of each unit action of a step's program, in order
  exec::Program program;           // this rank's program of a step
  // With ParityCase::record_timeline: the recorder's spans of the last step on this rank, and the
  // pipeline's timeline of that step gathered from every pipeline rank.
  std::vector<exec::TimelineRecorder::Span> spans;
  pipeline::MeasuredTimeline timeline;
};

// Writes +inf into element 0 of `p`'s gradient right before the embedding's backward of the
// `program`-th program this transform sees (1-based), when `enabled`. Before, not after: the
// observer runs first before an action, while after it the reducer has already posted the bucket.
class PoisonGradient final : public exec::Transform {
 public:
  PoisonGradient(exec::ParameterOwnership& ownership, const nn::Parameter& p, int program, bool enabled = true)
      : ownership_(ownership), p_(p), program_(program), enabled_(enabled) {}
  std::string_view name() const override { return "gradient poison"; }
  void begin(const exec::Program&) override { ++seen_; }
  void before(const exec::Event& e) override;

 private:
  exec::ParameterOwnership& ownership_;
  const nn::Parameter& p_;
  int program_;
  bool enabled_;
  int seen_ = 0;
};

config::ModelConfig gpt2_odd_config();  // an odd parameter count: divisible by neither 2 nor 4
config::ModelConfig llama_config();     // untied embeddings
// Mixture-of-experts models (4 experts, 2 blocks, T = 8) with router losses large enough to show:
// GPT-2 with top-1 routing in every block and a capacity tight enough that tokens drop; Llama with
// top-2 routing in block 1 only, beside a dense block.
config::ModelConfig gpt2_moe_config();
config::ModelConfig llama_moe_config();

// Tokens of row `row` of step `step`'s global batch: inputs [T] and targets [T].
void synthetic_rows(const ParityCase& c, int step, int64_t begin, int64_t rows, std::vector<int32_t>& inputs,
                    std::vector<int32_t>& targets);

// The single-process reference: the whole global batch in one straight forward and backward.
RunRecord run_reference(const ParityCase& c);
// The same with PipeDream-2BW's delayed gradient, written out by hand with two copies of the
// weights: step t's gradient is taken at W(max(0, t - 1)) and AdamW applies it to W(t).
RunRecord run_reference_2bw(const ParityCase& c);
// The delayed parameter update (ParityCase::delayed_update_after = N), by hand with the same two
// copies: steps up to N take their gradient at W(t), later ones at W(t - 1), and each is applied
// to W(t).
RunRecord run_reference_delayed_update(const ParityCase& c);
// PipeDream-2BW with TwoBWVersions::Newest over `dp` data-parallel ranks and `pp` stages of
// c.stage_layers blocks, by hand: the global batch as the pipelines' microbatches (microbatch j of
// each data-parallel rank), each run on weights assembled stage by stage, where stage s reads
// W(t - 1) for microbatches j <= pp - 2 - s of step t >= 1 and W(t) for the rest. Untied
// embeddings only: a tied weight would be read at two versions within one forward.
RunRecord run_reference_2bw_newest(const ParityCase& c, int dp, int pp);
// The end of an mpirun test's main: the failures of every rank of `world` summed (so every rank
// exits alike), a line from rank 0, and the exit code (0 when no rank failed).
int agree_on_failures(const RankChecks& checks, dist::Communicator& world);

// The main of a check program under mpirun: MPI up, the world communicator (watchdog at 60 s,
// sequence numbers checked unless `check_sequence` is false), `body`'s checks on every rank, and
// the exit code the ranks agree on; an exception on any rank prints it and aborts the job.
int run_rank_checks(int argc, char** argv, const std::function<void(dist::Communicator& world, RankChecks& t)>& body,
                    bool check_sequence = true);

// The proof of parity with one process: every step's loss and gradient norm within 1e-5 relative
// of the reference's, and the parameters at the end within 1e-4 (relative above 1).
void check_matches_reference(const RunRecord& run, const RunRecord& ref, const std::string& what, RankChecks& t);

// Mixed precision tracks fp32: every step's loss within 2% (relative) of the fp32 run's, and no
// step skipped. The 2% is the bar of "tracks fp32" (precision_test.cpp says what it allows for).
void check_tracks_fp32(const RunRecord& run, const RunRecord& fp32, const std::string& what, RankChecks& t);

// Every step's measured activation peak on this rank is the one predicted by walking its program.
void check_activation_prediction(const RunRecord& run, const std::string& what, RankChecks& t);

// Data parallel over all of `comm` (null: one process).
RunRecord run_data_parallel(const ParityCase& c, dist::Communicator* comm);
// Pipelined over all of `world` (pp its size, dp 1).
RunRecord run_pipelined(const ParityCase& c, dist::Communicator& world);
// Over the groups of `mesh` (null: one process): each dp rank its rows of the global batch, every
// pipeline and tensor-parallel rank of a dp rank the same rows. RunRecord::params are the
// one-process model's (gathered over tp). With ep > 1 the model is built with this rank's
// expert-parallel plan over ep.
RunRecord run_parallel(const ParityCase& c, const dist::Mesh* mesh);
// The parameters of a model built with this rank's tensor-parallel plan over `tp`, right after
// initialization, gathered into the one-process model's flat order.
std::vector<float> initial_parameters(const config::ModelConfig& model, uint64_t seed, dist::Communicator& tp);

}  // namespace tessera::testing
