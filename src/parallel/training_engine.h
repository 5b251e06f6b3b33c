#pragma once
// The training engine of one rank: the model's step assembled from the explicit-execution parts —
// the schedule's instruction list for this rank, lowered with the recompute plan into a program
// (exec/program.h), run by the interpreter (exec/interpreter.h) with the data-parallel transforms
// in its chain (parallel/data_parallel.h), the optimizer over the master segments, and the global
// gradient norm (parallel/grad_norm.h). The trainer, the parity tests and the benchmarks all step
// through it, so they run the same code.
//
// PipeDream-2BW (parallel.schedule = "2bw") runs several batches as one program without a flush
// (train_batches): the pipeline drains only where the program ends. Batch b's microbatches read
// version b or b - 1 as the schedule's actions say (EngineOptions::two_bw_versions) and its step
// makes version b + 1 from version b, whatever the programs' lengths, so a run's numbers do not
// depend on where it drained. This rank's previous version is stashed by parallel/weight_versions.h.
#include <memory>
#include <optional>
#include <span>

#include "dist/communicator.h"
#include "dist/mesh.h"
#include "exec/activation_offload.h"
#include "exec/activation_encoding.h"
#include "optim/offloaded_optimizer.h"
#include "optim/one_bit_adam.h"
#include "exec/interpreter.h"
#include "exec/ownership.h"
#include "exec/program.h"
#include "exec/recompute.h"
#include "exec/transform.h"
#include "nn/gpt.h"
#include "optim/optimizer_config.h"
#include "parallel/data_parallel.h"
#include "parallel/delayed_update.h"
#include "parallel/expert_parallel.h"
#include "parallel/grad_norm.h"
#include "parallel/loss_scaling.h"
#include "parallel/one_bit_exchange.h"
#include "parallel/shard_reduction.h"
#include "parallel/tensor_parallel.h"
#include "parallel/pipeline_stages.h"
#include "parallel/weight_versions.h"
#include "parallel/working_copies.h"
#include "memory/loss_scaler.h"
#include "config/precision.h"
#include "config/parallel_layout.h"
#include "schedule/generators.h"
#include "schedule/instruction.h"
#include "schedule/measured_timeline.h"

namespace tessera::parallel {

struct EngineOptions {
  // dp, tp, pp, zero_stage, schedule, virtual_stages, micro_batch and global_batch are read;
  // microbatches per step = B / (dp × b).
  config::ParallelLayout layout;
  int64_t bucket_bytes = int64_t{25} << 20;  // gradient buckets (PyTorch DDP's default)
  CompressionOptions compression;             // how the buckets are reduced (dense: none)
  optim::OptimizerConfig optimizer;  // optim/make_optimizer.h
  int seq_len = 1;
  exec::RecomputeOptions recompute;
  // The form kept activations wait in between a unit's forward and its backward
  // (exec/activation_encoding.h).
  exec::ActivationEncoding activation_encoding = exec::ActivationEncoding::None;
  // Blocks per pipeline stage (pp × virtual_stages entries, stage 0 first); empty: the split
  // balanced by the FLOP model's unit times (exec::balanced_stages), the same on every rank.
  std::vector<int64_t> stage_layers;
  // Optimal recomputation: time each unit's forward here (agreed over the data-parallel group) or,
  // when false, weigh units by their FLOPs.
  bool measure_unit_times = true;
  // The compute dtype (bf16, f16: the model reads 16-bit working copies, parallel/working_copies.h),
  // fp16's loss scaling and the dtype of the gradient reduction's messages (config/precision.h).
  config::PrecisionOptions precision;
  // Under PipeDream-2BW, which weight version a microbatch reads on a stage (pipeline/generators.h).
  pipeline::TwoBWVersions two_bw_versions = pipeline::TwoBWVersions::Newest;
  // The nvme tier's folder, this rank's alone: where offloaded activations (recompute.offload) and
  // an offloaded optimizer state go.
  std::string offload_dir;
  // The optimizer's state in the nvme tier, streamed through memory in chunks of about this many
  // bytes (optim/offloaded_optimizer.h); 0: in memory.
  int64_t offload_optimizer_chunk_bytes = 0;
  // ZeRO-3's parameter shard in the nvme tier (parallel/parameter_gatherer.h); needs zero_stage 3
  // and an offloaded optimizer state, which streams the master values with its chunks.
  bool offload_params = false;
  // ZeRO-Offload's delayed parameter update (parallel/delayed_update.h): from this optimizer step
  // on, each step's update runs while the next step's forward and backward read the weights from
  // before it; the steps before it are exact. 0: never.
  int64_t delayed_update_after = 0;
  // Those steps compute on the weights extrapolated by the last update's change instead
  // (DelayedUpdate::Weights::Extrapolated): one more copy of the owned values.
  bool delayed_update_extrapolate = false;
};

class TrainingEngine {
 public:
  // `mesh`: this rank's groups of options.layout (dist/mesh.h), collective over all of them; null:
  // one process. With pp > 1 this rank runs its pipeline rank's instruction list: its stages'
  // units, with the transfers to and from its neighbours. With tp > 1 the model must have been
  // built with this rank's TensorParallelPlan (parallel/tensor_parallel.h): its units run with the
  // tensor-parallel region (with layout.sp, the sequence-parallel one), and the gradient norm and
  // per-tensor optimizer statistics sum split parameters over the group.
  //
  // With ep > 1 (expert parallelism, parallel/expert_parallel.h) the model must have been built
  // with this rank's ExpertParallelPlan: its MoE layers exchange tokens over the mesh's ep group,
  // the expert gradients are reduced (and under ZeRO 1–3 sharded; under ZeRO-3 their parameters
  // too) over its edp group, the dense ones over dp. At ep 1 the ep and edp groups are not used.
  TrainingEngine(nn::GPT& model, MemoryAccountant& memory, const dist::Mesh* mesh, const EngineOptions& options);
  ~TrainingEngine();

  struct StepResult {
    double loss_sum = 0;  // this rank's microbatches (summed over the pipeline group: the last stage's)
    int64_t counted = 0;  // this rank's targets that count (likewise)
    GradNorm grad_norm;   // global, before clipping
    bool skipped = false;  // the gradient was not finite: no update on any rank
    double loss_scale = 1;  // the loss scale this step ran with (fp16; 1 otherwise)
    // The MoE layers' routing in this step's training forwards, summed over the data-parallel and
    // pipeline groups (empty for a dense model; under 2BW the whole program's, in its last batch).
    nn::MoeStatistics moe;
    double recompute_seconds = 0;  // this rank's Recompute actions (under 2BW the whole program's, in its last batch)
  };
  // One optimizer step over this rank's microbatches (one per program microbatch). Collective.
  // The global gradient norm is measured and clipped to max_grad_norm (0: measured, not clipped);
  // nullopt skips it altogether (benchmarks against frameworks whose step does not measure it).
  StepResult train_step(std::span<const exec::MicrobatchInput> microbatches, const exec::StepOptions& options, float lr,
                        std::optional<double> max_grad_norm);
  // lrs.size() optimizer steps, one per batch of microbatches (batch b's are [b m, (b + 1) m)),
  // batch b as step options.step + b (its learning rate lrs[b]). Under PipeDream-2BW one program
  // runs them all without a flush, each batch's step (the chain's finish with the tied gradient
  // sum, then the global norm, clipping, the update) at its OptimizerStep action; options.step must be the weight version the parameters
  // are (the optimizer steps taken, restore_weight_versions after a load). Flushing schedules run
  // one program per batch. The timeline, if any, records the last program. Collective.
  std::vector<StepResult> train_batches(std::span<const exec::MicrobatchInput> microbatches,
                                        const exec::StepOptions& options, std::span<const float> lrs,
                                        std::optional<double> max_grad_norm);
  // Applies a delayed update still running (EngineOptions::delayed_update_after), so that the
  // parameters are the newest weights: before an evaluation, a sample or a checkpoint reads them,
  // and after a load writes them. A run that applies at the same steps takes the same path, so a
  // resumed run follows the uninterrupted one. Collective under ZeRO (the shards are gathered).
  void apply_delayed_update();
  // Seconds the last step waited for the previous step's delayed update: what it did not hide.
  double delayed_update_wait_seconds() const {
    return delayed_update_ ? delayed_update_->last_wait_seconds() : 0.0;
  }
  // The timeline of the last step run with `recorder` in its StepOptions, every pipeline rank's on
  // one clock (parallel/pipeline_timeline.h). Collective over the pipeline group.
  pipeline::MeasuredTimeline measured_timeline(const exec::TimelineRecorder& recorder) const;
  // Loss sum and count of one evaluation microbatch (nothing kept). Collective under ZeRO-3.
  exec::ProgramResult evaluate(const exec::MicrobatchInput& microbatch);

  // Plans the step again for another number of microbatches per step (the global batch changes
  // with it; the same recompute options).
  void set_microbatches(int microbatches);

  // Every parameter's current value (collective: under pipelining each comes from its stage).
  DataParallel::FullParameters full_parameters();
  // The same values for code that only reads them (checkpoint saves, sampling): with ZeRO-3's
  // shard in the nvme tier, read one parameter at a time (DataParallel::read_only_parameters:
  // over several ranks where `order` is each once in store order).
  DataParallel::ReadOnlyParameters read_only_parameters(DataParallel::ReadOrder order);
  // Every parameter writable, for loading (DataParallel::WritableParameters: with ZeRO-3's shard
  // in the nvme tier, one parameter at a time). Collective as full_parameters().
  DataParallel::WritableParameters writable_parameters();
  // The nvme tier, for its accounting (null without offloading).
  memory::NvmeStore* nvme() { return nvme_.get(); }
  // The encoder of kept activations, for its counts (null without an encoding).
  exec::ActivationEncoder* activation_encoder() { return activation_encoder_.get(); }
  const exec::ActivationEncoder* activation_encoder() const { return activation_encoder_.get(); }
  // PipeDream-2BW: this rank's stash of the previous weight version (nullptr for other schedules).
  WeightVersions* weight_versions() { return weight_versions_.get(); }
  // After a checkpoint load at `step`: the parameters are weight version `step` and, under
  // PipeDream-2BW, the stash (loaded through weight_versions()->previous()) version step - 1.
  void restore_weight_versions(int64_t step);
  DataParallel& data_parallel() { return *data_parallel_; }
  // The pipeline group (nullptr with one pipeline rank).
  dist::Communicator* pipeline() const { return pp_; }
  // The tensor-parallel group (nullptr with one tensor-parallel rank).
  dist::Communicator* tensor_parallel() const { return tp_; }
  // The expert-parallel group (nullptr without expert parallelism).
  dist::Communicator* expert_parallel() const { return ep_; }
  // Whether this rank writes the elements of `p` it holds to a checkpoint, so that exactly one rank
  // writes each element of the model: the lowest pipeline rank holding it, tensor-parallel rank 0
  // where tp replicates it, and rank 0 of its data-parallel group (the experts': edp) unless ZeRO
  // shards it over that group (`sharded_by_zero`: master copies and their optimizer state under
  // ZeRO; not 2BW's previous weights, which every rank of the group holds whole).
  bool writes_checkpoint_of(const nn::Parameter& p, bool sharded_by_zero) const;
  // The parameters whose master copy this rank's optimizer updates, in its state's order.
  std::vector<const nn::Parameter*> optimizer_parameters();
  optim::Optimizer& optimizer() { return *optimizer_; }
  // The chunks an offloaded optimizer state streams in (0: the state is in compute memory).
  size_t optimizer_state_chunks() const { return offloaded_optimizer_ != nullptr ? offloaded_optimizer_->chunks() : 0; }
  // This rank's own persistent state for checkpoints (a gradient compressor's, 1-bit Adam's
  // errors); null when it has none.
  RankLocalState* rank_local_state();
  // fp16's loss scale (disabled for other precisions); its state goes into checkpoints.
  memory::LossScaler& loss_scaler() { return loss_scaler_; }
  // The 16-bit working copies (null in fp32).
  const WorkingCopies* working_copies() const { return working_copies_.get(); }
  exec::ParameterOwnership& ownership() { return ownership_; }
  exec::TransformChain& transforms() { return transforms_; }
  const pipeline::Schedule& schedule() const { return schedule_; }
  const exec::StagePlan& stages() const { return stages_; }
  const exec::Program& program() const { return program_; }
  // The activation peak of a step on this rank, predicted by walking its program
  // (exec/program_memory.h): exact for every schedule and recompute policy, pipelined or not.
  int64_t predicted_activation_peak() const;

 private:
  // The stages of the model: stage_layers, or balanced by the FLOP model.
  exec::StagePlan split_stages() const;
  // The units of this rank's stages, in order.
  std::vector<int> units_of_rank() const;
  // The schedule, each stage's recompute plan and this rank's program.
  void plan(const exec::UnitTimes& times);
  // The schedule and this rank's program for `batches` batches after `first_step` optimizer steps
  // (PipeDream-2BW: several batches; flushing kinds: (0, 1)).
  void plan_program(int first_step, int batches);
  // The optimizer step of one batch, at its OptimizerStep action.
  void optimizer_step(StepResult& result, float lr, std::optional<double> max_grad_norm);
  // 1-bit Adam's compressed step: on this rank's own gradient, the exchange inside the optimizer.
  void local_gradient_step(StepResult& result, float lr, std::optional<double> max_grad_norm,
                           std::span<const optim::Segment> segments);
  // Both data-parallel domains (the dense one and, under expert parallelism, the experts').
  void zero_grads();
  void after_optimizer_step();
  // After new master values: ZeRO's gathers and the 16-bit working copies follow them.
  void after_update_applied();
  // A program's MoE statistics summed over the data-parallel and pipeline groups (collective for
  // an MoE model; a dense model has none).
  nn::MoeStatistics moe_over_ranks(const nn::MoeStatistics& mine) const;
  // The loss of a program summed over the pipeline group (the last stage computes it).
  exec::ProgramResult over_pipeline(const exec::ProgramResult& mine) const;

  nn::GPT& model_;
  MemoryAccountant& memory_;
  EngineOptions options_;
  exec::ParameterOwnership ownership_;
  exec::TransformChain transforms_;
  // This rank's group of each dimension of the layout, taken from the mesh: null where this rank
  // is alone in it (or there is no mesh; ep and edp also at ep 1).
  dist::Communicator* dp_ = nullptr;
  dist::Communicator* pp_ = nullptr;
  dist::Communicator* tp_ = nullptr;
  dist::Communicator* ep_ = nullptr;
  dist::Communicator* edp_ = nullptr;
  // The nvme tier and the offloading of kept activations into it (null without offloading).
  std::unique_ptr<memory::NvmeStore> nvme_;
  std::unique_ptr<exec::ActivationOffload> activation_offload_;
  std::unique_ptr<exec::ActivationEncoder> activation_encoder_;
  // Tensor (and sequence) parallelism and expert parallelism in the chain (null without them).
  std::unique_ptr<TensorParallel> tensor_parallel_;
  std::unique_ptr<ExpertParallel> expert_parallel_;
  std::unique_ptr<DataParallel> data_parallel_;
  // Expert parallelism: the expert parameters' reduction over edp (null without it).
  std::unique_ptr<DataParallel> expert_data_parallel_;
  // Under 2BW the tied-gradient exchange runs while the next batch's transfers are in flight on
  // the pipeline group; on a communicator of its own their message tags cannot meet.
  std::unique_ptr<dist::Communicator> shared_params_comm_;
  std::unique_ptr<PipelineStageParameters> stage_params_;
  std::unique_ptr<WeightVersions> weight_versions_;
  // Per-tensor optimizer statistics summed over the ZeRO shards (null without ZeRO).
  std::unique_ptr<GroupShardReduction> shard_reduction_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::OffloadedOptimizer* offloaded_optimizer_ = nullptr;  // optimizer_, when its state is offloaded
  // Declared after the optimizer, so that an update still running ends before the optimizer does.
  std::unique_ptr<DelayedUpdate> delayed_update_;
  uint64_t running_step_ = 0;  // the optimizer step the running program's batch is
  // optim.name = "onebit_adam": the optimizer, which after its warm-up exchanges its momentum
  // itself over dp_. Null otherwise.
  optim::OneBitAdam* one_bit_adam_ = nullptr;
  // Its choice, as each program begins, of whether the gradients are reduced (null without it).
  std::unique_ptr<OneBitExchange> one_bit_exchange_;
  // Declared after every owner it may be layered over (ZeRO-3's gatherer inside data_parallel_, 2BW's
  // versions), so it is destroyed, and gives the working role back, first.
  std::unique_ptr<WorkingCopies> working_copies_;
  memory::LossScaler loss_scaler_;
  // fp16's loss scale in the chain (null when the scaler is disabled).
  std::unique_ptr<LossScaling> loss_scaling_;
  // With a loss scale and a compressor: its state as the running step found it (empty otherwise).
  std::vector<Tensor> compressor_state_at_step_start_;
  // Under expert parallelism with compression: the dense and the experts' compressors as one state.
  std::unique_ptr<JointRankState> joint_compressor_state_;
  // The compressors' rank-local state (null without compression).
  RankLocalState* compressor_state();
  enum class CompressorStateCopy { Keep, Restore };
  void copy_compressor_state(CompressorStateCopy direction);
  GradNormService norms_;
  exec::Interpreter interpreter_;
  pipeline::Schedule schedule_;
  exec::StagePlan stages_;
  exec::Program program_;
  exec::Program evaluation_;
  exec::UnitTimes times_;
};

}  // namespace tessera::parallel
