#include "plan/compression_model.h"

#include <algorithm>
#include <cmath>

#include "plan/device_time.h"

namespace tessera::plan {

namespace {

using config::CompressionMethod;

// `add(rows, cols, count)` for each kind of weight matrix of the stage, as the parameters store them
// (a linear layer's weight is [out, in]; PowerSGD's Q has a row per column).
template <class Add>
void for_each_stage_matrix(const config::ModelConfig& m, const Layout& l, int stage, Add add) {
  const double C = m.n_embd, F = m.ffn(), V = m.vocab_size, T = m.seq_len, t = l.tp;
  const double layers = static_cast<double>(m.n_layer) / l.pp;
  const bool llama = m.arch == config::Architecture::Llama;
  add(m.qkv_dim() / t, C, layers);  // q, k, v (column-parallel)
  add(C, C / t, layers);      // attention output (row-parallel)
  add(F / t, C, layers * (m.gated_mlp() ? 2 : 1));  // first MLP projection(s)
  add(C, F / t, layers);      // second MLP projection
  if (stage == 0) {
    add(V / t, C, 1);         // token embedding (vocabulary-parallel)
    if (!llama) add(T, C, 1); // learned positions
  }
  if (stage == l.pp - 1 && !m.tied_embeddings) add(V / t, C, 1);  // untied head
}

}  // namespace

MatrixShare stage_matrices(const config::ModelConfig& m, const Layout& l, int stage) {
  const double r = std::max(1, l.compression_rank);
  MatrixShare share;
  // A matrix enters only when rank r gains on it (r (rows + cols) < rows·cols), as at run time.
  for_each_stage_matrix(m, l, stage, [&](double rows, double cols, double count) {
    if (r * (rows + cols) >= rows * cols) return;
    share.elements += count * rows * cols;
    share.rows_and_cols += count * (rows + cols);
  });
  return share;
}

double compressor_state_bytes(const config::ModelConfig& m, const Layout& l, int stage, double domain_elements,
                              int64_t warmup_steps) {
  if (l.compression == CompressionMethod::None || l.compression == CompressionMethod::Qsgd) return 0;
  double elements = domain_elements;  // the error feedback
  if (l.compression == CompressionMethod::PowerSgd) {
    for_each_stage_matrix(m, l, stage, [&](double rows, double cols, double count) {
      const double r = std::min({static_cast<double>(std::max(1, l.compression_rank)), rows, cols});
      if (r * (rows + cols) >= rows * cols) return;
      const double useful = std::min({rows, cols, std::floor(rows * cols / (rows + cols))});
      const double largest = warmup_steps > 0 ? std::max(r, useful) : r;
      elements += count * cols * largest;
    });
  }
  return 4 * elements;
}

double compressed_reduction_seconds(const Layout& l, const ClusterSpec& c, const Group& dp, double elements,
                                    const MatrixShare& matrices) {
  const bool one_bit_adam = l.optimizer == optim::OptimizerKind::OneBitAdam;
  if ((l.compression == CompressionMethod::None && !one_bit_adam) || dp.size <= 1 || elements <= 0) return 0;
  const double n = dp.size;
  double seconds = 0;
  if (one_bit_adam) {
    // The steady state after its warm-up: the momentum's signs and a scale per 512 elements, sent
    // to their chunks' ranks (an all-to-all, a reduce-scatter's volume) and all-gathered back.
    const double message = std::ceil(elements / 8) + 4 * std::ceil(elements / 512);
    seconds += reduce_scatter_seconds(dp, message) + all_gather_seconds(dp, message);
    // Its passes over memory beside Adam's own (optim/one_bit_adam.cpp), bytes an element: the
    // momentum added to the worker's error (12) and compressed in place (8); the members' chunks
    // added into this rank's server error (8 in all) and that compressed (8/n); the momentum zeroed
    // and the gathered average added into it (4 + 8).
    seconds += stream_seconds(c, (40 + 8 / n) * elements);
    return seconds;
  }
  // Reading the gradient and its error, writing both back.
  const double stream = stream_seconds(c, 16 * elements);
  if (l.compression == CompressionMethod::TopK) {
    // Where the cluster measured this engine's selection: its passes cost more than their bytes.
    seconds += std::max(stream, c.efficiency.kernels.top_k * elements);
    const double k = std::max(1.0, std::ceil(l.compression_ratio * elements));
    seconds += 2 * all_gather_seconds(dp, n * k * 4);
    return seconds;
  }
  seconds += stream;
  if (l.compression == CompressionMethod::Qsgd) {
    seconds += all_gather_seconds(dp, n * elements) + all_gather_seconds(dp, n * 4 * std::ceil(elements / 512));
  } else if (l.compression == CompressionMethod::OneBit) {
    seconds += all_gather_seconds(dp, n * std::ceil(elements / 8)) + all_gather_seconds(dp, n * 4 * std::ceil(elements / 512));
  } else {  // powersgd
    const double r = std::max(1, l.compression_rank);
    const double rest = std::max(0.0, elements - matrices.elements);
    // P = M Q and Q = Mᵀ P̂ (the rows × cols products with r columns), then P̂ Qᵀ.
    const double p_and_q = 4 * r * matrices.rows_and_cols;  // bytes of P and Q
    seconds += all_reduce_seconds(dp, p_and_q) + (rest > 0 ? all_reduce_seconds(dp, 4 * rest) : 0);
    seconds += fused_seconds(c, Precision::Fp32, 6 * r * matrices.elements);
  }
  return seconds;
}

}  // namespace tessera::plan
