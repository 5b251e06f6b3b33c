#pragma once
// Adafactor (Shazeer & Stern 2018, Algorithms 4 and 5 with Section 6's update clipping and
// Section 7's relative step size). A matrix's second moment is kept factored: an exponential
// average of the row sums R and the column sums C of G² + ε1, with V̂ = R Cᵀ / ΣR (O(n + m) state
// instead of O(nm)); a vector keeps it whole. β2 follows the schedule 1 − t^(−decay_rate). The
// update U = G / √V̂ is scaled down to RMS(U) ≤ d (clip_threshold), optionally averaged into a first
// moment (beta1, off by default as in the paper), and applied with step α = lr, or with
// relative_step α = lr · max(ε2, RMS(W)) per tensor (the paper's parameter scale; the schedule
// plays ρ_t). Decoupled weight decay W ← W − αλW applies to matrices and embeddings.
// ε1 = 1e-30 and ε2 = 1e-3 are the paper's. Tensors of more than two dimensions are factored as a
// matrix of their last dimension against the rest.
//
// Row and column sums, RMS(U) and RMS(W) are whole-tensor statistics: under ZeRO each rank adds its
// part's terms and the sums are reduced over the shards (optim/tensor_statistics.h), and a rank
// holding part of a matrix keeps the matrix's whole R and C, the same on every holder.
// State per owned segment: rows + columns floats for a factored matrix, one per element otherwise;
// one per element more with first_moment (optim::state_bytes_per_parameter, optim/make_optimizer.h).
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

class Adafactor final : public Optimizer {
 public:
  Adafactor(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
            std::span<const Segment> layout, const ShardReduction* reduction);

  std::string_view name() const override { return "adafactor"; }
  void step(float lr, std::span<const Segment> segments) override;
  // "row", "col": each factored segment's matrix's R and C; "v": the unfactored segments' second
  // moment; "m" (first_moment only): [owned elements].
  StateDict state_dict() override;
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return owned_; }

  static constexpr double kEps1 = 1e-30;  // added to G² (regularizes V̂)
  static constexpr double kEps2 = 1e-3;   // the least parameter scale of the relative step
  // The rows and columns a tensor is factored into, or nullopt-like {0, 0} for an unfactored one.
  struct Factors {
    int64_t rows = 0, cols = 0;
    bool factored() const { return rows > 0; }
  };
  static Factors factors_of(const nn::Parameter& p);

 private:
  OptimizerConfig config_;
  const ShardReduction* reduction_;
  std::vector<Segment> layout_;
  int64_t owned_ = 0;
  TensorSums sums_;     // per parameter: [rows] row sums, [cols] column sums (factored), Σ W²
  TensorSums updates_;  // per parameter: Σ U²
  Tensor row_, col_, v_, m_;
  std::vector<int64_t> row_at_, col_at_, v_at_;  // each segment's first element in row_, col_, v_ (+ the end)
  int64_t step_ = 0;
};

}  // namespace tessera::optim
