#pragma once
// What gradient compression (parallel.compression) costs and saves in the data-parallel reduction,
// by the same formulas the runtime's compressors send (src/parallel/compression/compressor.h):
// per step and rank, for Ψ gradient elements over a group of n,
//   topk      all-gathers of k = ⌈ratio·Ψ⌉ values and k indices (4 bytes each)
//   qsgd      an all-gather of Ψ signed bytes (and a norm per 512 elements)
//   onebit    an all-gather of ⌈Ψ/8⌉ bytes of signs (and a scale per 512 elements)
//   powersgd  all-reduces of P (Σ rows·r), Q (Σ cols·r) and the elements of no compressed matrix
// and with optimizer=onebit_adam (which reduces its own momentum; its steady state after the
// warm-up) an all-to-all and an all-gather of ⌈Ψ/8⌉ bytes of signs and a scale per 512 elements
// and its passes over the momentum, its errors and the messages (40 + 8/n bytes an element);
// the others a pass over the gradient and its error feedback in memory (PowerSGD also its products).
// A compressed reduction is synchronous: nothing of it hides behind backward.
#include <string>
#include <string_view>

#include "config/model_config.h"
#include "plan/cluster.h"
#include "plan/collectives.h"
#include "plan/layout.h"

namespace tessera::plan {

// Seconds one compressed reduction of `elements` gradient elements of the rank's stage takes on
// `dp`, on cluster `c` (0 for "none" or a group of one). `matrices` are Σ rows·cols and
// Σ (rows + cols) of the stage's weight matrices (PowerSGD's share).
struct MatrixShare {
  double elements = 0;      // Σ rows·cols
  double rows_and_cols = 0; // Σ (rows + cols)
};
double compressed_reduction_seconds(const Layout& l, const ClusterSpec& c, const Group& dp, double elements,
                                    const MatrixShare& matrices);

// The weight matrices of pipeline stage `stage` (tensor-parallel splits applied).
MatrixShare stage_matrices(const config::ModelConfig& m, const Layout& l, int stage);

// The bytes a rank's compressor keeps across steps: top-k's and one-bit's error feedback, one f32 per
// element of the stage's reduced gradient (`domain_elements`), PowerSGD's too and its warm-start Q
// (cols × rank per compressed matrix; with `warmup_steps` the rank ramps down from each matrix's
// largest useful one, which Q is sized for); QSGD keeps nothing.
double compressor_state_bytes(const config::ModelConfig& m, const Layout& l, int stage, double domain_elements,
                              int64_t warmup_steps);

}  // namespace tessera::plan
