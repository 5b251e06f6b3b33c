#include "train/memory_check.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "config/tensor_parallel_shape.h"
#include "exec/recompute.h"
#include "nn/gpt.h"
#include "optim/make_optimizer.h"
#include "parallel/zero_memory.h"

namespace tessera::train {

std::string readable_bytes(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  return bytes < kGiB ? fmt::format("{:.1f} MiB", bytes / kMiB) : fmt::format("{:.2f} GiB", bytes / kGiB);
}

std::string MemoryEstimate::describe() const {
  return fmt::format("parameters {}, gradients {}, optimizer {}, activations {}, buffers {}", readable_bytes(params), readable_bytes(grads),
                     readable_bytes(optimizer), readable_bytes(activations), readable_bytes(buffers));
}

MemoryEstimate estimate_run_memory(const RunConfig& c) {
  MemoryEstimate e;
  // A rank's parameters: its tensor-parallel blocks and the replicated ones (pipelining is not
  // counted: every rank is taken to hold all stages, a bound).
  const int tp = c.parallel.tp;
  const int64_t psi = config::tensor_parallel_rank_parameters(c.model, tp);
  const int dp = c.parallel.dp;
  const parallel::ZeroBytes states = parallel::zero_bytes(c.parallel.zero_stage, psi, (psi + dp - 1) / dp);
  e.params = static_cast<double>(states.params);
  e.grads = static_cast<double>(states.grads);
  // The optimizer's own state per parameter (zero_bytes counts Adam's 8 bytes).
  e.optimizer = static_cast<double>(states.optimizer) / 8.0 * optim::state_bytes_per_parameter(c.optim);
  // PipeDream-2BW's stash of the previous weight version: one more f32 copy (of the whole model, a
  // bound: a pipeline rank stashes its stages' share).
  if (c.parallel.schedule == "2bw") e.params += 4.0 * static_cast<double>(psi);
  // Mixed precision's 16-bit working copies of the weights the model reads.
  const config::PrecisionOptions precision = c.precision_options();
  if (precision.mixed()) e.params += static_cast<double>(dtype_size(precision.compute)) * static_cast<double>(psi);
  // Activations by the recompute plan, as the engine will run it (FLOP-proportional unit times;
  // the optimal policy is bounded by its budget anyway).
  const int B = c.train.micro_batch_size, T = c.model.seq_len;
  exec::StagePlan plan = exec::even_stages(c.model.n_layer + 2, 1);
  exec::RecomputeOptions recompute;
  recompute.policy = memory::parse_recompute_policy(c.memory.recompute);
  recompute.every_k = c.memory.recompute_every;
  recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(c.memory.activation_budget_mb) * 1048576.0);
  if (recompute.policy == memory::RecomputePolicy::Optimal) {
    e.activations = static_cast<double>(recompute.budget_bytes);
  } else {
    const bool sp = c.parallel.sp;
    exec::plan_recompute(plan, c.model, B, T, recompute, exec::nominal_unit_times(c.model, B, T), tp, sp,
                         precision.compute);
    const bool all_forwards_first = c.parallel.schedule == "gpipe";
    const int alive = all_forwards_first ? c.accumulation_steps() : 1;
    e.activations =
        static_cast<double>(exec::predict_activations(plan, c.model, B, T, alive, tp, sp, precision.compute).peak);
  }
  // Transients beside them: a block's backward scratch and a unit's gathered parameters or two
  // gradient buckets (a generous bound; the exact ones are counted while the run goes). A bucket
  // never holds more than the rank's gradients, so a small model is not charged the full size.
  const double C = c.model.n_embd, F = c.model.ffn(), tokens = double(B) * T;
  const double block_params = 12.0 * C * C + 2.0 * C * F;
  const double embedding_params = double(c.model.vocab_size) * C + double(T) * C;
  const double bucket = std::min(static_cast<double>(c.parallel.bucket_mb) * 1048576.0, 4.0 * static_cast<double>(psi));
  e.buffers = 4.0 * tokens * (6.0 * C + 2.0 * F) + 2.0 * 4.0 * std::max(block_params, embedding_params) + 3.0 * bucket;
  return e;
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return 0;
}

void check_memory_fits(const RunConfig& c, double per_process, const std::string& description, int processes_here,
                       double available) {
  if (!(available > 0)) return;  // not Linux, or no /proc: nothing to compare with
  const double need = per_process * processes_here;
  TS_CHECK(need <= available,
           "this run needs about {} per process ({}) for {} process{} on this machine, {} in all, but only {} "
           "are available. Shrink it: train.micro_batch_size (now {}; activations grow with it), memory.recompute = "
           "\"full\" (keeps only each block's input), parallel.zero_stage (shards the model states over "
           "parallel.dp), or a smaller model (model.n_layer = {}, model.n_embd = {})",
           readable_bytes(per_process), description, processes_here, processes_here == 1 ? "" : "es", readable_bytes(need), readable_bytes(available),
           c.train.micro_batch_size, c.model.n_layer, c.model.n_embd);
}

}  // namespace tessera::train
