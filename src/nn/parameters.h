#pragma once
// Named parameters in one flat buffer. Modules declare their parameters by name and shape while the
// model is built; allocate() then places all values in one contiguous f32 buffer (tag params) and
// all gradients in another (tag grads). One flat buffer is what optimizers, gradient clipping,
// data-parallel buckets and ZeRO shards work on.
//
// A Parameter is a description (name, shape, place in the flat buffers, how it is initialized), not
// storage: a module never holds a pointer to a parameter's values. During a step it asks its
// StepContext for the parameter's working copy and gradient target (nn/parameter_access.h), and
// whoever owns those roles answers — the store itself for a plain run, or a transform such as
// ZeRO-3 that keeps only a shard and gathers the rest (exec/ownership.h). So no transform ever
// rewrites a module's view of its weights.
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "config/parallel_layout.h"
#include "core/tensor.h"
#include "nn/parameter_access.h"

namespace tessera::nn {

enum class Init {
  Normal,  // N(0, std)
  Zeros,
  Ones,
};

// How a parameter is laid out over the parallel dimensions. `global_shape` is its shape in the
// one-process model; this rank holds the block of it that `splits` select: each split cuts one
// dimension of the tensor into `parts` equal pieces over one mesh dimension (tensor parallelism
// cuts a column-parallel weight's rows over tp) and keeps piece `index`. Every other mesh
// dimension replicates it, except where a transform shards its storage flat (ZeRO over dp, which
// the parameter itself does not see). Initialization reads the random number of each element's
// GLOBAL index, so any sharding starts from exactly the one-process weights.
//
// A dimension may be a concatenation of blocks that are cut separately (`blocks`): a fused q, k, v
// projection holds q's rows, then k's, then v's, and a tensor-parallel rank takes its heads of
// each. The global shape may also carry padding rows that the one-process model does not have (a
// vocabulary padded to a multiple of tp): they are the last `padding_rows` rows of dimension 0,
// start at zero and take no part in the model's function.
struct ShardSpec {
  struct Split {
    int dim = 0;                                  // which dimension of the global shape is cut
    config::MeshDim over = config::MeshDim::TP;   // over which mesh dimension's ranks
    int parts = 1;                                // into how many equal pieces
    int index = 0;                                // the piece this rank holds
    // Sizes of consecutive blocks along `dim` (summing to its size), each cut into `parts`; the
    // held piece is piece `index` of every block, in order. Empty: the dimension is one block.
    std::vector<int64_t> blocks;
    bool operator==(const Split&) const = default;
  };
  Shape global_shape;
  std::vector<Split> splits;
  int64_t padding_rows = 0;

  // The parts dimension `dim` is cut into (1: whole), and the global coordinate of this rank's first
  // element along it (0: whole; for a dimension of blocks, that of the first block).
  int parts(int dim) const;
  int64_t start(int dim) const;
  // The parts it is cut into over mesh dimension `over` (1: replicated over it).
  int parts_over(config::MeshDim over) const;
  // The shape of the parameter in the one-process model: the global shape without its padding.
  Shape unpadded_shape() const;
  bool operator==(const ShardSpec&) const = default;

  Shape local_shape() const;
  // The mesh dimensions that split it, a bit per config::MeshDim (a global norm sums its squares
  // over those groups and counts it once over the dimensions that replicate it).
  uint32_t split_mask() const;
  bool replicated_over(config::MeshDim dim) const { return (split_mask() >> static_cast<int>(dim) & 1u) == 0; }
  // Index in the global parameter (row-major) of element `local` (row-major in the local block).
  int64_t global_index(int64_t local) const;
  // Whether global element `global` (row-major) lies in the padding rows.
  bool is_padding(int64_t global) const;
  void validate(const std::string& name) const;
};

// What a parameter is to the optimizers: weights (matrices, embeddings, an MoE layer's stacked
// expert matrices) are decayed and adapted (LAMB's and LARS' trust ratios); biases (an MoE layer's
// stacked expert biases too, whatever their dimensions) and norm gains are not, as in the GPT-2
// recipe and LAMB's and LARS' exclusions.
enum class ParameterRole : uint8_t { Weight, Bias, NormGain };

// The part of the model a parameter belongs to, where code treats the parts apart: an MoE layer's
// stacked experts ([E, ...], weights and biases) are split over ep and their gradients reduced over
// the ranks that hold the same experts (edp); the embedding tables keep 32-bit moments under 8-bit
// Adam (their rare tokens' rows are what 8 bits lose). Everything else is Dense.
enum class ParameterPart : uint8_t { Dense, Embedding, Expert };

// Says how a parameter is split when the model declares it: a tensor-parallel plan
// (parallel/tensor_parallel.h) is one, an expert-parallel one (parallel/expert_parallel.h)
// another. The model itself declares every parameter by its one-process shape and reads the
// shapes it was given back.
class ShardingRules {
 public:
  virtual ~ShardingRules() = default;
  // The spec of parameter `name` whose one-process shape is `shape`; nullopt: not split.
  virtual std::optional<ShardSpec> spec_for(const std::string& name, const Shape& shape, ParameterRole role,
                                            ParameterPart part) const = 0;
};

struct Parameter {
  int id = 0;        // position in the store: dense, for per-parameter tables
  std::string name;  // e.g. "blocks.3.attn.qkv.weight"
  Shape shape;       // of the local block (equal to spec.global_shape when not split)
  ShardSpec spec;
  ParameterRole role = ParameterRole::Weight;
  ParameterPart part = ParameterPart::Dense;
  Init init = Init::Zeros;
  float init_std = 0.0f;
  size_t offset = 0;  // element offset in the flat buffers
  int64_t numel() const { return shape_numel(shape); }
};

class ParameterStore final : public ParameterAccess {
 public:
  // `sharding` (kept by reference, may be null: nothing split) splits what the model declares.
  explicit ParameterStore(const ShardingRules* sharding = nullptr) : sharding_(sharding) {}

  // References stay valid: parameters live in a deque. `shape` is the one-process shape; the
  // sharding rules may give the parameter a block of it (read p.shape back).
  Parameter& declare(std::string name, Shape shape, ParameterRole role, Init init, float init_std = 0.0f,
                     ParameterPart part = ParameterPart::Dense);
  // Declares the local block of a parameter split as `spec` says (its shape is spec.local_shape()).
  Parameter& declare_sharded(std::string name, ShardSpec spec, ParameterRole role, Init init, float init_std = 0.0f,
                             ParameterPart part = ParameterPart::Dense);
  void allocate(MemoryAccountant& accountant);
  // GPT-2 style initialization from the counter RNG: element g of parameter `name` (g its global
  // index) is normal(seed, stream_id("init:" + name), g), so the values do not depend on the layout.
  void initialize(uint64_t seed);
  // Instead of allocate() and initialize(): no buffer of the whole values is ever made; whoever
  // takes the values over (ZeRO-3 with its shard in the nvme tier) makes each parameter's initial
  // values as it stores them (initial_values). So a model whose values are larger than RAM starts.
  void allocate_deferred(MemoryAccountant& accountant, uint64_t seed);
  bool deferred() const { return deferred_seed_.has_value(); }
  // Elements [begin, end) of p's initial values (its local flat order) into `out`: the bits
  // initialize() gives them. Only for a deferred store.
  void initial_values(const Parameter& p, int64_t begin, int64_t end, float* out) const;
  void zero_grads();

  Parameter& get(const std::string& name);
  const Parameter& get(const std::string& name) const;
  std::deque<Parameter>& all() { return params_; }
  const std::deque<Parameter>& all() const { return params_; }
  int size() const { return static_cast<int>(params_.size()); }
  int64_t numel() const { return total_; }
  bool allocated() const { return allocated_; }

  // The whole flat buffers, while this store holds them. A transform that takes a role over (ZeRO-3
  // keeps the values as shards, ZeRO-2 the gradients) releases the store's buffer; reading it
  // afterwards is an error that says who holds the values instead. The gradients are allocated on
  // first use: a run whose reducer takes them over before any backward never holds the whole
  // buffer (with the values, the two would not fit where only a shard of each is meant to).
  Tensor& flat_values();
  Tensor& flat_grads();
  bool holds_values() const { return values_.defined(); }
  bool holds_grads() const { return allocated_ && grads_owner_.empty(); }
  void release_values(const std::string& new_owner);
  void release_grads(const std::string& new_owner);

  // Views of one parameter in the flat buffers: [p.shape].
  Tensor value(const Parameter& p);
  Tensor grad_of(const Parameter& p);

  // ParameterAccess: the store answers for a plain one-process run.
  Tensor weight(const Parameter& p) override { return value(p); }
  Tensor grad(const Parameter& p) override { return grad_of(p); }

 private:
  // The declarations are checked (no name twice) and the store counts as allocated.
  void declarations_complete(MemoryAccountant& accountant);

  const ShardingRules* sharding_ = nullptr;
  std::deque<Parameter> params_;
  int64_t total_ = 0;
  bool allocated_ = false;
  MemoryAccountant* accountant_ = nullptr;  // the gradients' when they are first used
  std::optional<uint64_t> deferred_seed_;  // the seed of values made on demand (allocate_deferred)
  Tensor values_;  // [numel]
  Tensor grads_;   // [numel], once used
  std::string values_owner_, grads_owner_;  // who took them over, for error messages
};

}  // namespace tessera::nn
