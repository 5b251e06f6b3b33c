#include "train/memory_check.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "config/tensor_parallel_shape.h"
#include "exec/recompute.h"
#include "nn/gpt.h"
#include "optim/make_optimizer.h"
#include "parallel/zero_memory.h"
#include "memory/nvme_store.h"
#include "train/planned_run.h"

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
  if (c.parallel.schedule == config::ScheduleKind::PipeDream2BW) e.params += 4.0 * static_cast<double>(psi);
  // Mixed precision's 16-bit working copies of the weights the model reads.
  const config::PrecisionOptions precision = c.precision_options();
  if (precision.mixed()) e.params += static_cast<double>(dtype_size(precision.compute)) * static_cast<double>(psi);
  // Activations by the recompute plan, as the engine will run it (FLOP-proportional unit times;
  // the optimal and dtr policies are bounded by their budget anyway).
  const int B = c.train.micro_batch_size, T = c.model.seq_len;
  exec::StagePlan plan = exec::even_stages(c.model.n_layer + 2, 1);
  exec::RecomputeOptions recompute;
  recompute.policy = c.memory.recompute;
  recompute.every_k = c.memory.recompute_every;
  recompute.budget_bytes = static_cast<int64_t>(static_cast<double>(c.memory.activation_budget_mb) * 1048576.0);
  if (config::recompute_takes_budget(recompute.policy)) {
    e.activations = static_cast<double>(recompute.budget_bytes);
  } else {
    const bool sp = c.parallel.sp;
    exec::plan_recompute(plan, c.model, B, T, recompute, exec::nominal_unit_times(c.model, B, T), tp, sp,
                         precision.compute);
    const bool all_forwards_first = c.parallel.schedule == config::ScheduleKind::GPipe;
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

RunMemory run_memory_of(const RunConfig& cfg) {
  RunMemory r;
  try {
    const PlannedRun run = planned_run(cfg);
    const PredictedMemory memory = predict_memory(cfg, run);
    const auto worst = static_cast<size_t>(memory.worst);
    const plan::MemoryBreakdown& tags = memory.tags[worst];
    r.per_process = memory.peak[worst];
    for (double n : memory.nvme) r.nvme = std::max(r.nvme, n);
    r.description = fmt::format(
        "each tag's own peak: parameters {}, gradients {}, optimizer {}, activations {}, workspace {}, communication "
        "{}{}{}", readable_bytes(tags.params), readable_bytes(tags.grads), readable_bytes(tags.optimizer),
        readable_bytes(tags.activations), readable_bytes(tags.workspace), readable_bytes(tags.comm),
        tags.working_copies > 0 ? ", working copies " + readable_bytes(tags.working_copies) : std::string(),
        tags.weight_stash > 0 ? ", weight stash " + readable_bytes(tags.weight_stash) : std::string());
    r.start_line = fmt::format("memory peak: about {} per process{}, every tag at once, as `tessera plan --config` "
                               "predicts it ({}){}",
                               readable_bytes(r.per_process),
                               memory.peak.size() > 1 ? fmt::format(" on pipeline stage {}, the highest", memory.worst)
                                                      : std::string(),
                               r.description,
                               run.split_note.empty() ? std::string() : "; it predicts the even split of the stages");
  } catch (const Error& e) {
    // A run the cost model does not describe (uneven stages, say) still gets a bound.
    const MemoryEstimate estimate = estimate_run_memory(cfg);
    r.per_process = estimate.total();
    r.description = estimate.describe();
    r.start_line = fmt::format("memory: at most about {} per process ({}; a bound: {})", readable_bytes(r.per_process),
                               r.description, e.what());
  }
  return r;
}

double staging_bytes(const RunConfig& c) {
  if (!c.memory.offloads()) return 0;
  const memory::NvmeStore::Options store;
  return static_cast<double>(store.staging_bytes) * std::min(store.staging_buffers, store.threads);
}

namespace {

// The settings that change what a process holds, tried in turn; those whose prediction fits `limit`.
std::string settings_that_fit(const RunConfig& c, double limit, double beside) {
  struct Change {
    std::string keys;
    std::function<void(RunConfig&)> apply;
  };
  std::vector<Change> changes;
  if (!c.memory.offloads()) {
    changes.push_back({"memory.offload_activations = \"nvme\"", [](RunConfig& r) { r.memory.offload_activations = "nvme"; }});
  }
  if (c.memory.offload_params == "none" && c.parallel.pp == 1) {
    // The parameters and the optimizer state move to the nvme tier together, as ZeRO-3's shards.
    const bool zero3 = c.parallel.zero_stage == 3;
    changes.push_back({fmt::format("{}memory.offload_params = \"nvme\" with memory.offload_optimizer = \"nvme\"",
                                   zero3 ? "" : "parallel.zero_stage = 3, "),
                       [](RunConfig& r) {
                         r.parallel.zero_stage = 3;
                         r.memory.offload_params = "nvme";
                         r.memory.offload_optimizer = "nvme";
                       }});
  }
  if (c.memory.recompute != config::RecomputePolicy::Full) {
    changes.push_back({"memory.recompute = \"full\"", [](RunConfig& r) {
                         r.memory.recompute = config::RecomputePolicy::Full;
                         r.memory.recompute_every = 0;
                         r.memory.activation_budget_mb = 0;
                       }});
  }
  if (c.train.micro_batch_size > 1) {
    changes.push_back({fmt::format("train.micro_batch_size = {}", c.train.micro_batch_size / 2),
                       [](RunConfig& r) { r.train.micro_batch_size /= 2; }});
  }
  std::string text;
  for (const Change& change : changes) {
    RunConfig tried = c;
    change.apply(tried);
    try {
      tried.validate();
    } catch (const Error&) {
      continue;  // not a setting this run can take
    }
    const RunMemory m = run_memory_of(tried);
    const double need = m.per_process + beside + staging_bytes(tried);
    text += fmt::format("{}{} ({} {})", text.empty() ? "" : ", ", change.keys, need <= limit ? "fits:" : "still",
                        readable_bytes(need));
  }
  return text.empty() ? std::string("a smaller model or batch") : text;
}

}  // namespace

namespace {

// Beside the counted peak and what the process held before the model: the kernel libraries' code
// and scratch (oneDNN's JIT kernels and buffers, the OpenMP threads' stacks) and the allocator's
// cache of freed blocks. Measured: the default model's resident set ended 32 MiB above its
// baseline and memory peak (2 threads); a margin over that.
constexpr double kLibraryAllowance = 64.0 * 1048576.0;

}  // namespace

void check_memory_fits(const RunConfig& c, const RunMemory& memory, int processes_here, double available,
                       double baseline) {
  baseline += kLibraryAllowance;
  const double per_process = memory.per_process + baseline + staging_bytes(c);
  const double budget = static_cast<double>(c.memory.ram_budget_mb) * 1048576.0;
  if (budget > 0) {
    TS_CHECK(per_process <= budget,
             "a process of this run needs about {} of RAM (its memory peak {}, {} the process and its libraries "
             "hold besides, {} of staging for the nvme tier), over memory.ram_budget_mb = {:g}. Settings that change "
             "it: {}",
             readable_bytes(per_process), readable_bytes(memory.per_process), readable_bytes(baseline),
             readable_bytes(staging_bytes(c)), c.memory.ram_budget_mb, settings_that_fit(c, budget, baseline));
  }
  if (available > 0) {  // not Linux, or no /proc: nothing to compare with
    const double need = per_process * processes_here;
    TS_CHECK(need <= available,
             "this run needs about {} per process ({}) for {} process{} on this machine, {} in all, but only {} "
             "are available. Shrink it: train.micro_batch_size (now {}; activations grow with it), memory.recompute = "
             "\"full\" (keeps only each block's input), memory.offload_activations = \"nvme\", parallel.zero_stage "
             "(shards the model states over parallel.dp), or a smaller model (model.n_layer = {}, model.n_embd = {})",
             readable_bytes(per_process), memory.description, processes_here, processes_here == 1 ? "" : "es",
             readable_bytes(need), readable_bytes(available), c.train.micro_batch_size, c.model.n_layer,
             c.model.n_embd);
  }
  if (memory.nvme > 0) {
    const std::string folder =
        c.memory.offload_dir.empty() ? (std::filesystem::path(c.train.out_dir) / "offload").string() : c.memory.offload_dir;
    // The folder's disk: the folder itself, or the nearest existing parent of one still to be made.
    std::filesystem::path probe = folder;
    std::error_code ec;
    while (!probe.empty() && !std::filesystem::exists(probe, ec)) probe = probe.parent_path();
    struct statvfs disk {};
    if (!probe.empty() && ::statvfs(probe.c_str(), &disk) == 0) {
      const double free_bytes = static_cast<double>(disk.f_bavail) * static_cast<double>(disk.f_frsize);
      const double need = memory.nvme * processes_here;
      TS_CHECK(need <= free_bytes,
               "the offload folder '{}' is on a disk with {} free, but this run's nvme tier holds up to {} ({} per "
               "process); free space there or set memory.offload_dir to a folder on a disk with room",
               folder, readable_bytes(free_bytes), readable_bytes(need), readable_bytes(memory.nvme));
    }
  }
}

}  // namespace tessera::train
