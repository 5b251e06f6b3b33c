#pragma once
// Adafactor (Shazeer & Stern 2018, Algorithms 4 and 5 with Section 6's update clipping and
// Section 7's relative step size). A matrix's second moment is kept factored: an exponential
// average of the row sums R and the column sums C of G² + ε1, with V̂ = R Cᵀ / ΣR (O(n + m) state
// instead of O(nm)); a vector keeps it whole. β2 follows the schedule 1 − t^(−decay_rate). The
// update U = G / √V̂ is scaled down to RMS(U) ≤ d (clip_threshold), optionally averaged into a first
// moment (beta1, off by default as in the paper), and applied with step α = lr, or with
// relative_step α = lr · max(ε2, RMS(W)) per tensor (the paper's parameter scale; the schedule
// plays ρ_t). Decoupled weight decay W ← W − αλW applies to matrices and embeddings.
// ε1 = 1e-30 and ε2 = 1e-3 are the paper's. A tensor of more than two dimensions (an MoE layer's
// experts, [E, F, C]) is a stack of matrices of its last two: each matrix is factored, clipped and
// scaled on its own, and each expert's bias of a stack [E, F] is a vector of its own, as Adafactor
// treats a model whose experts are weights of their own (Mixtral's layout); so expert parallelism,
// which gives each rank whole experts, splits no statistic.
//
// Row and column sums, RMS(U) and RMS(W) are whole-matrix statistics: under ZeRO each rank adds its
// part's terms and the sums are reduced over the shards (optim/tensor_statistics.h), and a rank
// holding part of a matrix keeps the matrix's whole R and C, the same on every holder.
// State per owned segment: rows + columns floats per factored matrix, one per element otherwise;
// one per element more with first_moment (optim::state_bytes_per_parameter, optim/make_optimizer.h).
//
// The per-element passes are ops (ops/optimizer_update.h: ops::adafactor_sums, the moments, the
// update's squares and its application); this class keeps their bookkeeping: where each owned
// element lies in the whole tensor (runs, found once from the segments' ShardSpec), the β2
// schedule, each group's clip, rate and decay, the reductions and the state's layout.
#include "ops/optimizer_update.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

class Adafactor final : public Optimizer {
 public:
  Adafactor(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
            std::span<const Segment> layout, const ShardReduction* reduction);

  std::string_view name() const override { return optimizer_name(OptimizerKind::Adafactor); }
  void step(float lr, std::span<const Segment> segments) override;
  // "row", "col": each factored segment's matrix's R and C; "v": the unfactored segments' second
  // moment; "m" (first_moment only): [owned elements].
  StateDict state_dict() override;
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return owned_; }

  static constexpr double kEps1 = 1e-30;  // added to G² (regularizes V̂)
  static constexpr double kEps2 = 1e-3;   // the least parameter scale of the relative step
  // How a tensor's statistics are kept. A factored tensor is `matrices` matrices (one, or a stack's)
  // of `rows` × `cols`: element g is row g / cols of them all, in matrix g / (rows·cols). An
  // unfactored one (a vector, a norm gain, a bias — an MoE layer's stacked biases [E, F] too, one
  // vector per expert) keeps its second moment per element. Each group (a matrix, or a bias's
  // vector) has its own update RMS and parameter scale.
  struct Factors {
    int64_t rows = 0, cols = 0, matrices = 0;
    int64_t groups = 1, group_size = 1;
    bool factored() const { return rows > 0; }
    int64_t group_of(int64_t element) const { return element / group_size; }
    // R of every matrix and C of every matrix: the state floats of a factored tensor.
    int64_t state_floats() const { return matrices * (rows + cols); }
  };
  static Factors factors_of(const nn::Parameter& p);

 private:
  OptimizerConfig config_;
  const ShardReduction* reduction_;
  std::vector<Segment> layout_;
  int64_t owned_ = 0;
  // Per parameter: its matrices' row sums [matrices·rows], column sums [matrices·cols] (factored),
  // then Σ W² per matrix (one for an unfactored tensor).
  TensorSums sums_;
  TensorSums updates_;  // per parameter: Σ U² per matrix (one for an unfactored tensor)
  Tensor row_, col_, v_, m_;
  std::vector<int64_t> row_at_, col_at_, v_at_;  // each segment's first element in row_, col_, v_ (+ the end)
  std::vector<std::vector<ops::ElementRun>> runs_;  // each segment's owned elements in the whole tensor
  int64_t step_ = 0;

  // Segment k's part of R, C and V.
  Tensor row_of(size_t k) const;
  Tensor col_of(size_t k) const;
  Tensor v_of(size_t k) const;
};

}  // namespace tessera::optim
