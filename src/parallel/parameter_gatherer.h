#pragma once
// ZeRO-3's parameters: a transform in the ParameterPlacement slot and the owner of every
// parameter's working copy. Each rank keeps only its shard of the flat parameter buffer (tag
// params, ⌊Ψ/N⌋ or ⌈Ψ/N⌉ elements; the store's whole buffer is released). The parameters of the
// unit an action runs are all-gathered into buffers tagged 'comm' before it and freed after it, and
// the model's weight requests during the action are answered from them. A weight read outside
// that window fails loudly instead of reading stale values.
//
// Prefetch follows the program. Consecutive actions on the same unit form one run and share one
// gather (a recomputation followed by the unit's backward gathers once); when a run starts, the
// gather of the next run is posted, so it moves while this one computes. At most two gathered
// runs are alive (the current and the next): the 'comm' bound is twice the largest unit, whatever
// the recompute policy, because only what the program will run is ever gathered.
//
// Volume: a unit's ranges are gathered once per run; a tied head reads the token embedding, which
// is then gathered a second time in each direction.
//
// Under a pipeline (kept_units given: the units of this rank's stages) the layout's domain is
// those units' parameters, in pieces (shard_layout.h), and a unit's run is every action on it in
// the step: its parameters are gathered before its first action (the first microbatch's forward)
// and kept across the microbatches until after its last (the last microbatch's backward, or weight
// half), as torchtitan keeps FSDP's parameters unsharded under pipelining. A pipeline runs each
// unit once per microbatch in each direction, interleaved with the other units and microbatches,
// so gathering per action would move the stage's parameters 2m times a step; kept, they move once,
// and the stage holds all of its units gathered through the middle of the step: the 'comm' bound
// is the sum of its units' gathered bytes.
//
// With the nvme tier (memory.offload_params = "nvme") the shard lives there (offloaded_shard.h)
// instead of in compute memory. A run's parts of the shard are read before its gather. In one
// process the reads land straight in the gathered buffers, and the next run's are posted when a
// run starts, as its gather would be. With several ranks the reads go one run further ahead:
// when a run starts, the next run's gather is posted (its parts were read while the previous run
// computed) and the reads of the run after it, so both the disk and the network work while this
// run computes. In compute memory: the gathered buffers as without it, and with several ranks
// two runs' parts of the shard (tag params) between their read and their gather. The master
// values are then no RAM buffer: the offloaded optimizer streams them (offloaded()). The nvme
// tier holds a shard of one piece: not under a pipeline.
//
// Under expert parallelism two gatherers share the work (docs/moe.md): one shards the dense
// parameters over dp (ParameterPlacement slot), the other the experts' over their edp group
// (ExpertParameterPlacement slot). Both follow the same program, each gathering its part of every
// unit's parameters over its own group, and each answers the working copies of its parameters.
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "dist/communicator.h"
#include "exec/ownership.h"
#include "exec/transform.h"
#include "memory/nvme_store.h"
#include "nn/parameters.h"
#include "parallel/offloaded_shard.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

// Which parameters a gatherer answers for, and whether the store's values go once it has its shard.
// By default every parameter, and they go; under expert parallelism the experts' gatherer is built
// first, answers for its domain and leaves the values to the dense one.
struct GatherScope {
  std::vector<int> working_ids;  // the parameters whose working copies it claims; empty: all
  bool releases_store = true;
};

class ParameterGatherer final : public exec::Transform, public exec::StorageOwner {
 public:
  // Copies this rank's shard out of the (initialized) store — into `nvme` when given —, releases
  // the store's buffer and claims the working copies (of the scope's parameters). `kept_units`
  // (pipelines): the units this rank runs, each kept gathered for the whole step; empty: gathered
  // per run.
  ParameterGatherer(nn::ParameterStore& params, const std::vector<nn::Unit>& units, const ShardLayout& layout, int rank,
                    dist::Communicator* comm, MemoryAccountant& memory, exec::ParameterOwnership& ownership,
                    memory::NvmeStore* nvme = nullptr, std::vector<int> kept_units = {}, const GatherScope& scope = {});
  ~ParameterGatherer() override;

  // This rank's parts of the layout's pieces, packed in flat order (ShardLayout::shard_offset);
  // null when the shard is in the nvme tier.
  float* shard() { return shard_.defined() ? shard_.data<float>() : nullptr; }
  // The shard in the nvme tier, for the optimizer's master values (null when it is in memory).
  OffloadedShard* offloaded() { return offloaded_.get(); }

  // Largest gathered buffer of one unit, in bytes (two of them live at once).
  size_t largest_unit_bytes() const;
  // The most gathered bytes live at once: two runs' (the running one and the prefetched one), or
  // under a pipeline every kept unit's.
  size_t gathered_bound_bytes() const;

  // exec::Transform
  std::string_view name() const override { return "ZeRO-3 parameter gathering"; }
  void begin(const exec::Program& program) override;
  void before(const exec::Event& event) override;
  void after(const exec::Event& event) override;
  void finish(const exec::Program& program) override;

  // exec::StorageOwner
  std::string_view owner_name() const override { return "ZeRO-3 (parameter shards, gathered unit by unit)"; }
  Tensor working(const nn::Parameter& p, const exec::Event* event) override;

  // Every parameter gathered into one buffer (tag comm) until the handle goes away, for code that
  // reads the model whole (checkpoints, sampling). Collective.
  class Full final : public nn::ParameterAccess {
   public:
    Full(ParameterGatherer& owner, Tensor buffer) : owner_(&owner), buffer_(std::move(buffer)) {}
    Tensor weight(const nn::Parameter& p) override;
    Tensor grad(const nn::Parameter& p) override;
    // Copies this rank's part of the full buffer back into its shard (after loading a checkpoint).
    void write_back();
    // The buffer in the store's flat order: the layout's pieces gathered, the rest (another pipeline
    // stage's parameters) for the caller to fill.
    float* values() { return buffer_.data<float>(); }

   private:
    ParameterGatherer* owner_;
    Tensor buffer_;  // [the store's numel]
  };
  Full gather_all();
  // The layout's pieces gathered into `values` (the store's flat order), the rest untouched: a
  // second gatherer's part of a Full buffer (the experts'). Collective.
  void gather_into(float* values);
  // Copies this rank's part of the layout's pieces from `values` back into its shard.
  void keep_part_of(const float* values);

  // Every parameter read from the nvme tier when it is asked for, each into a fresh buffer (tag
  // comm) that lives as long as the caller keeps it: for code that only reads the model
  // (checkpoint saves, sampling), which then holds one parameter at a time instead of the whole
  // model. Its tensors are copies: what is written into them never reaches the shard; loading goes
  // through WriteOneAtATime. Over several ranks each rank reads its part of the parameter and the
  // parts are all-gathered, so every weight() is a collective of the group (gathers_each_read()):
  // every rank asks for the same parameters in the same order (a checkpoint save asks for each
  // once, in store order, on every rank).
  class OneAtATime final : public nn::ParameterAccess {
   public:
    explicit OneAtATime(ParameterGatherer& owner) : owner_(&owner) {}
    Tensor weight(const nn::Parameter& p) override;
    Tensor grad(const nn::Parameter& p) override;

   private:
    ParameterGatherer* owner_;
  };
  // The shard is in the nvme tier: the model is read and written one parameter at a time.
  bool streams() const { return offloaded_ != nullptr; }
  // A parameter read one at a time is gathered from the shards of several ranks (a collective).
  bool gathers_each_read() const { return !alone(); }
  OneAtATime read_one_at_a_time();

  // Every parameter written to the nvme tier one at a time, for loading a model larger than RAM
  // (a checkpoint, weights to start from): take(p) hands out a fresh buffer (tag comm) for p's
  // whole value, put(p) writes this rank's part of it over its extent of the shard (all of it in
  // one process), waits for the writes and lets the buffer go. So a load holds one parameter, not
  // the whole model that gather_all() and Full::write_back() hold; over several ranks every rank
  // loads every parameter and keeps its part, with no collective. A parameter taken and not put is
  // not written. Where streams() holds.
  class WriteOneAtATime final : public nn::ParameterSink {
   public:
    explicit WriteOneAtATime(ParameterGatherer& owner) : owner_(&owner) {}
    Tensor take(const nn::Parameter& p) override;
    void put(const nn::Parameter& p) override;

   private:
    ParameterGatherer* owner_;
    const nn::Parameter* taken_ = nullptr;  // the parameter handed out and not yet put
    Tensor value_;                          // its buffer [p.shape]
  };
  WriteOneAtATime write_one_at_a_time();

 private:
  struct Gathered {
    std::vector<Tensor> buffers;  // one per range the unit reads (offloaded, several ranks: once gathering)
    std::vector<Tensor> parts;    // offloaded, several ranks: this rank's part of each range, read
    OffloadedShard::Works reads;  // offloaded: the reads of the parts (or of the buffers, alone)
    std::vector<dist::WorkPtr> works;
    bool gathering = false;  // the gathers are posted (or need none)
    bool ready = false;      // the buffers hold the unit's parameters
  };
  struct UnitParams {
    std::vector<nn::ParamRange> ranges;  // each inside one piece of the layout
  };
  struct Run {
    int unit = 0;
    int first = 0;  // first and last action index
    int last = 0;
  };
  // A deferred store (nn::ParameterStore::allocate_deferred): its initial values written into the
  // offloaded shard parameter by parameter.
  void write_initial_values(const nn::ParameterStore& params, MemoryAccountant& memory);
  void post(int run);
  // Offloaded over several ranks: waits for the run's reads and posts its gathers.
  void start_gather(int run);
  // Waits for the run's reads, posts its gathers if they wait for them, and waits for the gathers.
  void complete(int run);
  void drain();
  bool alone() const { return comm_ == nullptr || comm_->size() == 1; }
  // This rank's part `part` of a piece in the packed shard (any valid address when it is empty).
  const float* shard_part(nn::ParamRange part) const;
  size_t unit_bytes(int unit) const;

  ShardLayout layout_;
  int64_t store_numel_;  // every parameter's elements, this rank's domain or not
  std::vector<int> kept_units_;
  int rank_;
  dist::Communicator* comm_;
  MemoryAccountant& memory_;
  nn::ParamRange mine_;  // the shard's one range (the nvme tier's shard is one piece)
  Tensor shard_;  // [shard size], tag params; undefined when offloaded
  std::unique_ptr<OffloadedShard> offloaded_;
  std::vector<UnitParams> unit_params_;
  std::vector<Run> runs_;
  std::vector<int> run_of_;        // [action index] -> run, -1 for actions without a unit
  std::map<int, Gathered> slots_;  // run -> its gather (current and prefetched)
};

}  // namespace tessera::parallel
