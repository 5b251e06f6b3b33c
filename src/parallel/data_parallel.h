#pragma once
// Data parallelism and ZeRO stages 1–3, applied to a model that contains no parallel code: this
// class sets up, for one data-parallel group, the storage owners and the transforms of the
// interpreter's chain (exec/), and owns this rank's master shard.
//
//   stage 0  the store keeps everything; the GradientReducer transform all-reduces the buckets
//   stage 1  + the master copy (what the optimizer updates) is this rank's shard of the store's
//            flat buffer; the reducer reduce-scatters; after the update the shards are all-gathered
//   stage 2  + the reducer owns the gradient targets (bucket storage per microbatch) and keeps the
//            reduced gradients in a persistent shard
//   stage 3  + the ParameterGatherer transform owns the working copies and the master is a shard of
//            its own: units are gathered while they run (parameter_gatherer.h); under a pipeline
//            the shard is of the stage's parameters, and a unit stays gathered for the whole step
//
// One training step, as the engine drives it (parallel/training_engine.h):
//   zero_grads(); interpreter runs the program (reductions posted as buckets complete, ZeRO-3
//   gathers around each unit); at the optimizer step: master_segments() → global norm, clipping,
//   optimizer update; after_optimizer_step() (ZeRO-1/2: all-gather the updated parameters).
//
// What each rank holds (fp32 with Adam, Ψ parameters, N ranks, shard = ⌊Ψ/N⌋ or ⌈Ψ/N⌉ elements;
// formulas in zero_memory.h, checked by tests/parallel):
//   stage 0: params 4Ψ, grads 4Ψ, optimizer 8Ψ                    = 16Ψ
//   stage 1: params 4Ψ, grads 4Ψ, optimizer 8 shard               = 8Ψ + 8Ψ/N
//   stage 2: params 4Ψ, grads 4 shard, optimizer 8 shard          = 4Ψ + 12Ψ/N
//   stage 3: params 4 shard, grads 4 shard, optimizer 8 shard     = 16Ψ/N
// plus transient 'comm' buffers (gradient buckets in stages 2–3, gathered units in stage 3).
//
// The model is built whole on every rank (same seed, same values) and then sharded here, so
// construction briefly holds the full parameters and gradients.
#include <memory>
#include <optional>

#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/transform.h"
#include "nn/parameters.h"
#include "parallel/gradient_reducer.h"
#include "parallel/offloaded_gradients.h"
#include "parallel/parameter_gatherer.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

struct DataParallelOptions {
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t{25} << 20;  // gradient bucket size (PyTorch DDP's default)
  // The flat ranges this group reduces and shards, in flat order (shard_layout.h); empty: the whole
  // buffer. A pipeline rank gives the parameters of its stages (PipelineStageParameters::domain),
  // so its data-parallel group — the same stages on other replicas — shards only those.
  std::vector<nn::ParamRange> domain;
  CompressionOptions compression;  // how buckets are reduced (parallel/compression/compressor.h)
  DType message_dtype = DType::F32;  // of dense reductions, summed in f32 (GradientReducer::set_message_dtype)
  // The mesh dimension `comm` is: DP, or EDP for the expert parameters under expert parallelism
  // (their reduction takes the chain's ExpertGradientReduction slot, ZeRO-3's gathering of them the
  // ExpertParameterPlacement slot, and their ZeRO shards are spread over edp, which a global norm
  // must sum over).
  config::MeshDim group = config::MeshDim::DP;
  // ZeRO-3: the nvme tier that holds this rank's parameter shard (memory.offload_params) and its
  // gradient shard (offloaded_gradients.h); null: compute memory.
  memory::NvmeStore* offload_params = nullptr;
  // Under sequence parallelism, the tensor-parallel group over which the gradients of the
  // parameters it does not split are partial: with offload_params their sum over it is taken as
  // each part of the gradient shard lands in the nvme tier (offloaded_gradients.h). Null otherwise.
  dist::Communicator* sequence_parallel = nullptr;
  // ZeRO-3 under a pipeline: the units this rank's stages run, each kept gathered from its first
  // action of a step to its last (parameter_gatherer.h); empty: gathered per run of actions.
  std::vector<int> kept_units;
  // ZeRO-3 under expert parallelism, the dense group: the parameters whose working copies the
  // experts' group (built before it, over edp) answers, and shards from the store's values, which
  // it leaves for this group to shard and release.
  std::vector<int> working_answered_elsewhere;
};

class DataParallel final : public exec::StorageOwner {
 public:
  // `comm` is the data-parallel group (nullptr: one process). Every member calls this with the
  // same model and options. The model's parameters must be initialized. Registers its transforms
  // in `transforms` (removed again by the destructor) and claims roles in `ownership`.
  DataParallel(nn::ParameterStore& params, const std::vector<nn::Unit>& units, dist::Communicator* comm,
               MemoryAccountant& memory, const DataParallelOptions& options, exec::ParameterOwnership& ownership,
               exec::TransformChain& transforms);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return layout_.ranks(); }
  int zero_stage() const { return options_.zero_stage; }
  dist::Communicator* comm() const { return comm_; }
  const ShardLayout& layout() const { return layout_; }
  // The parameters this group reduces (and under ZeRO shards), by id.
  const std::vector<int>& domain_ids() const { return domain_ids_; }
  // The flat elements whose master copy this rank updates, in flat order.
  std::vector<nn::ParamRange> owned() const;
  const std::vector<Bucket>& buckets() const { return reducer_->buckets(); }
  // The gradient compressor (null without compression): its state persists across steps.
  GradientCompressor* compressor() const { return compressor_.get(); }
  // A bucket of this step held a non-finite value before its compressor saw it.
  bool compressed_non_finite() const;
  // Whether the gradient buckets are reduced (GradientReducer::set_reducing).
  void set_reducing(bool reducing);
  // Upper bound of live 'comm' bytes during a step (bucket storage and gathered parameters).
  size_t comm_bound_bytes() const;
  // ZeRO-3 with the shard in the nvme tier: where the master values are, for the offloaded
  // optimizer (the master segments then carry no values). Null otherwise.
  optim::OffloadedValues* offloaded_values() const { return gatherer_ ? gatherer_->offloaded() : nullptr; }
  // ZeRO-3 with the gradient shard in the nvme tier too: where the reduced gradients are (the
  // master segments then carry none). Null otherwise.
  OffloadedGradients* offloaded_gradients() const { return offloaded_grads_.get(); }

  void zero_grads();
  // ZeRO-1/2: every rank's updated shard is all-gathered into the whole buffer. Collective.
  void after_optimizer_step();

  // Every parameter readable until the handle goes away (ZeRO-3 gathers them into a transient
  // buffer; other stages answer from the store). Collective.
  class FullParameters final : public nn::ParameterAccess {
   public:
    FullParameters(nn::ParameterStore& store, std::optional<ParameterGatherer::Full> full)
        : store_(store), full_(std::move(full)) {}
    Tensor weight(const nn::Parameter& p) override { return full_ ? full_->weight(p) : store_.value(p); }
    Tensor grad(const nn::Parameter& p) override { return full_ ? full_->grad(p) : store_.grad_of(p); }
    // Every parameter's values in flat order: ZeRO-3's gathered buffer or the store's. Under a
    // pipeline only this rank's stages' are current until PipelineStageParameters::full_values.
    float* flat_values() { return full_ ? full_->values() : store_.flat_values().data<float>(); }
    // After the values were overwritten (a loaded checkpoint): keep this rank's part (ZeRO-3).
    void write_back() {
      if (full_) full_->write_back();
      for (ParameterGatherer* more : more_) more->keep_part_of(flat_values());
    }
    // ZeRO-3 under expert parallelism: the experts' gatherer fills its part of the buffer too and
    // keeps its part of it on write_back().
    void add(ParameterGatherer& more) {
      more.gather_into(flat_values());
      more_.push_back(&more);
    }

   private:
    nn::ParameterStore& store_;
    std::optional<ParameterGatherer::Full> full_;
    std::vector<ParameterGatherer*> more_;
  };
  FullParameters full_parameters();
  // ZeRO-3: this group's parameters gathered into `full` (another group's whole-model buffer), and
  // kept from it on write_back(); without ZeRO-3 the store holds them already. Collective.
  void gather_into(FullParameters& full);

  // How a reader of the whole model asks for the parameters (read_only_parameters()).
  enum class ReadOrder {
    // Each parameter once, in store order, on every rank of the group (a checkpoint save: the rank
    // that writes the model file as it writes them, the others alongside it).
    EachOnceInStoreOrder,
    // As the reader goes (a sample reads every parameter once per token).
    AsTheReaderGoes,
  };

  // Every parameter readable until the handle goes away, for code that only reads the model
  // (checkpoint saves, sampling): what it is given are the values or copies of them, and nothing
  // written into them is kept (loading uses writable_parameters()). ZeRO-3 with the shard in the
  // nvme tier reads each parameter from there when asked, so a model larger than RAM can be read:
  // in one process in any order; over several ranks each read all-gathers the parameter's parts
  // (read_together()), so only where every rank reads each once in store order, and a reader that
  // goes its own way gets the whole model gathered once. Elsewhere it is full_parameters().
  // Collective as that.
  class ReadOnlyParameters final : public nn::ParameterAccess {
   public:
    explicit ReadOnlyParameters(FullParameters full) : full_(std::move(full)) {}
    ReadOnlyParameters(ParameterGatherer::OneAtATime streamed, bool together)
        : streamed_(std::move(streamed)), together_(together) {}
    Tensor weight(const nn::Parameter& p) override { return streamed_ ? streamed_->weight(p) : full_->weight(p); }
    Tensor grad(const nn::Parameter& p) override;
    // Each weight() is a collective of the data-parallel group (ModelState::values_read_together).
    bool read_together() const { return together_; }

   private:
    std::optional<FullParameters> full_;
    std::optional<ParameterGatherer::OneAtATime> streamed_;
    bool together_ = false;
  };
  ReadOnlyParameters read_only_parameters(ReadOrder order);

  // Every parameter writable, for loading a checkpoint or weights into the model: the loader takes
  // a parameter's tensor, fills it and puts it back (nn::ParameterSink), then calls finish(), which
  // keeps what was loaded. ZeRO-3 with the shard in the nvme tier writes each parameter's part of
  // this rank there when it is put (every rank loads every parameter), so a model larger than RAM
  // can be loaded. Elsewhere the tensors are views of the values: of the store, or with ZeRO-3 of
  // the whole model gathered into one buffer, whose part of this rank finish() copies into the
  // shard (several ranks each cut their part out of the one buffer every rank loaded). Collective
  // as full_parameters().
  //
  // As a ParameterAccess (what a checkpoint's ModelState holds) it answers the values where they
  // are the buffer written; written one at a time, there is no such buffer, and asking fails.
  class WritableParameters final : public nn::ParameterAccess, public nn::ParameterSink {
   public:
    explicit WritableParameters(FullParameters full) : full_(std::move(full)) {}
    explicit WritableParameters(ParameterGatherer::WriteOneAtATime streamed) : streamed_(std::move(streamed)) {}
    Tensor take(const nn::Parameter& p) override;
    void put(const nn::Parameter& p) override;
    // The load is complete: ZeRO-3's gathered buffer goes back into this rank's shard.
    void finish();
    bool one_at_a_time() const { return streamed_.has_value(); }
    Tensor weight(const nn::Parameter& p) override;
    Tensor grad(const nn::Parameter& p) override;

   private:
    std::optional<FullParameters> full_;
    std::optional<ParameterGatherer::WriteOneAtATime> streamed_;
  };
  WritableParameters writable_parameters();

  // exec::StorageOwner: the master role from stage 1 on.
  std::string_view owner_name() const override { return "ZeRO (this rank's master shard)"; }
  std::vector<optim::Segment> master_segments(std::span<const nn::Parameter* const> params) override;

 private:
  // Where the elements of `part` (inside this rank's shard) live: the values and the reduced gradients.
  float* values_of(nn::ParamRange part);
  float* grads_of(nn::ParamRange part);
  uint32_t over_this_group() const;  // Segment::sharded_over's bit for this group

  nn::ParameterStore& params_;
  dist::Communicator* comm_;
  DataParallelOptions options_;
  int rank_;
  ShardLayout layout_;
  std::vector<int> domain_ids_;  // the parameters inside the domain, in store order
  exec::ParameterOwnership& ownership_;
  exec::TransformChain& transforms_;
  Tensor grad_shard_;  // stages 2 and 3: [shard size], tag grads; undefined when offloaded
  std::unique_ptr<OffloadedGradients> offloaded_grads_;
  std::unique_ptr<ParameterGatherer> gatherer_;  // stage 3
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<GradientCompressor> compressor_;  // null without compression
};

}  // namespace tessera::parallel
