// The keys of how the run executes: parallel, compression, precision, memory, checkpoint and log
// (config_keys.h).
#include "train/config_keys.h"

#include "config/compression_method.h"
#include "config/parallel_layout.h"
#include "memory/recompute_policy.h"

namespace tessera::train {

namespace {

std::string_view schedule_of(const RunConfig& c) { return config::schedule_name(c.parallel.schedule); }
void set_schedule(RunConfig& c, std::string_view name) {
  const std::optional<config::ScheduleKind> kind = config::find_schedule_kind(name);
  TS_CHECK(kind.has_value(), "config: parallel.schedule = '{}' is not known; use \"1f1b\", \"gpipe\", "
           "\"interleaved\", \"zb-h1\" or \"2bw\"", name);
  c.parallel.schedule = *kind;
}

std::string_view compression_of(const RunConfig& c) { return config::compression_name(c.parallel.compression); }
void set_compression(RunConfig& c, std::string_view name) { c.parallel.compression = config::parse_compression(name); }

std::string_view recompute_of(const RunConfig& c) { return config::recompute_policy_name(c.memory.recompute); }
void set_recompute(RunConfig& c, std::string_view name) {
  const std::optional<config::RecomputePolicy> policy = config::find_recompute_policy(name);
  TS_CHECK(policy.has_value(), "config: memory.recompute = '{}' is not known; use \"none\", \"full\", \"every_k\", "
           "\"selective\", \"optimal\", \"dtr\" or \"checkmate\"", name);
  c.memory.recompute = *policy;
}

std::string_view f32_gemm_of(const RunConfig& c) { return config::float_gemm_setting_name(c.precision.f32_gemm); }
void set_f32_gemm(RunConfig& c, std::string_view name) {
  const std::optional<config::FloatGemmSetting> setting = config::find_float_gemm_setting(name);
  TS_CHECK(setting.has_value(), "config: precision.f32_gemm = '{}' is not known; use \"auto\", \"onednn\" or "
           "\"openblas\"", name);
  c.precision.f32_gemm = *setting;
}

}  // namespace

std::vector<ConfigKey> execution_keys() {
  return {
    {.key = "parallel.dp",
     .field = in_parallel<&ParallelSection::dp>,
     .range = Range{1, 1 << 20},
     .doc = "data-parallel ranks; left out under a launcher (`tessera launch -n N`, mpirun, srun), it is N / "
            "(tp × pp)"},
    {.key = "parallel.tp",
     .field = in_parallel<&ParallelSection::tp>,
     .range = Range{1, 1 << 10},
     .doc = "tensor-parallel ranks (Megatron-LM): attention heads, the MLP's hidden width and the vocabulary "
            "(embedding, head and loss) split over them; tp must divide `model.n_head`, `model.n_kv_head` and "
            "the MLP width (the error lists the values that work); a vocabulary it does not divide is padded "
            "with classes that never win; the world is `dp × tp × pp` processes, tp the fastest-varying rank"},
    {.key = "parallel.sp",
     .field = in_parallel<&ParallelSection::sp>,
     .doc = "sequence parallelism over the tensor-parallel ranks: the residual stream, norms and dropout hold "
            "T/tp positions per rank, all-gathered into the split layers and reduce-scattered out of them; "
            "needs tp > 1 dividing `model.seq_len`"},
    {.key = "parallel.ep",
     .field = in_parallel<&ParallelSection::ep>,
     .range = Range{1, 1 << 10},
     .doc = "expert-parallel ranks carved out of dp (must divide dp and `model.moe_experts`). Each rank holds "
            "E / ep experts of every MoE layer; their gradients are reduced over the dp / ep ranks holding "
            "the same ones. Not with ZeRO-3, compression or 1-bit Adam"},
    {.key = "parallel.pp",
     .field = in_parallel<&ParallelSection::pp>,
     .range = Range{1, 1 << 10},
     .doc = "pipeline ranks: the model's layers cut into consecutive stages, stage s on rank s mod pp; the "
            "world is `dp × tp × pp` processes (with ZeRO stage 0, 1 or 2)"},
    {.key = "parallel.stage_layers",
     .field = in_parallel<&ParallelSection::stage_layers>,
     .doc = "blocks per pipeline stage, first stage first (`pp × virtual_stages` numbers summing to "
            "`model.n_layer`); empty: the split whose slowest stage is fastest by the FLOP model (the "
            "embedding goes with the first stage, the norm, head and loss with the last); the split is "
            "printed at start"},
    {.key = "parallel.zero_stage",
     .field = in_parallel<&ParallelSection::zero_stage>,
     .range = Range{0, 3},
     .doc = "ZeRO stage 0–3: shard the optimizer state (1), plus gradients (2), plus parameters (3) over the "
            "data-parallel ranks"},
    {.key = "parallel.schedule",
     .field = KindName{schedule_of, set_schedule},
     .doc = "the order in which each rank runs its microbatches' forwards and backwards: `\"1f1b\"` (one "
            "forward, one backward: one microbatch alive at a time), `\"gpipe\"` (all forwards, then all "
            "backwards), `\"zb-h1\"` (backward split into input and weight halves), `\"interleaved\"` (with "
            "`parallel.virtual_stages` model chunks per rank), `\"2bw\"` (PipeDream-2BW: no flush between "
            "steps, two weight versions, see `parallel.weight_version`; the pipeline drains at log, eval, "
            "sample and checkpoint steps)"},
    {.key = "parallel.weight_version",
     .field = in_parallel<&ParallelSection::weight_version>,
     .doc = "2bw: the weights a microbatch reads on a stage. `\"newest\"`: the newest the stage holds; only "
            "the microbatches a stage starts before its previous step (p − 1 − s of each step on stage s, "
            "none at `parallel.pp = 1`) read the previous version. `\"delayed\"`: every microbatch of step t "
            "reads the weights of step t − 1 on every stage (the paper's uniform delay). Refused with other "
            "schedules"},
    {.key = "parallel.virtual_stages",
     .field = in_parallel<&ParallelSection::virtual_stages>,
     .range = Range{1, 1 << 10},
     .doc = "model chunks per pipeline rank for the interleaved schedule (non-consecutive layers: rank r "
            "holds stages r, r + pp, …); with `pp > 1` the microbatches per step must be a multiple of `pp`"},
    {.key = "parallel.bucket_mb",
     .field = in_parallel<&ParallelSection::bucket_mb>,
     .range = Range{.low = 4.0 / 1048576, .high = 1048576,
                    .message = "{key} = {value} must hold at least one f32 element (4 bytes) and be at most 1048576"},
     .doc = "gradient bucket size in MiB; each bucket is reduced as soon as backward completes it"},
    {.key = "parallel.timeout_seconds",
     .field = in_parallel<&ParallelSection::timeout_seconds>,
     .range = Range{.low = 0, .high = kUnbounded, .low_open = true, .message = "{key} must be positive, got {value}"},
     .doc = "a collective taking longer aborts the whole job (watchdog), naming rank, operation and sequence "
            "number"},
    {.key = "parallel.compression",
     .field = KindName{compression_of, set_compression},
     .doc = "gradient compression in the data-parallel reduction, any ZeRO stage: `\"topk\"` (the largest "
            "`compression.ratio` of each bucket with error feedback), `\"qsgd\"` (stochastic rounding to "
            "`compression.levels` levels, one byte an element), `\"onebit\"` (signs times the mean magnitude, "
            "with error feedback), `\"powersgd\"` (each matrix as a rank-`compression.rank` product, error "
            "feedback, warm start); each rank saves its compressor's state in checkpoints. With fp16, a "
            "bucket is checked for overflow before its compressor sees it, and a step the loss scale skips "
            "puts the error feedback (and PowerSGD's warm start) back as the step found it, from a copy of "
            "that state taken as each step begins"},
    {.key = "parallel.grad_dtype",
     .field = in_parallel<&ParallelSection::grad_dtype>,
     .doc = "dtype of the data-parallel gradient reduction's messages: `\"bf16\"` or `\"fp16\"` send half the "
            "bytes, each rank's bucket rounded once, summed in f32 by an all-to-all (and all-gathered once "
            "more without ZeRO); needs dp > 1 and no compression"},
    {.key = "compression.ratio",
     .field = in_compression<&CompressionSection::ratio>,
     .range = Range{.low = 0, .high = 1, .message = "{key} = {value} must be a fraction of each bucket in (0, 1]"},
     .default_text = "0 (0.01)",
     .doc = "topk: fraction of each bucket's elements sent; 0 takes the default"},
    {.key = "compression.levels",
     .field = in_compression<&CompressionSection::levels>,
     .range = Range{0, 127},
     .default_text = "0 (127)",
     .doc = "qsgd: quantization levels, 1 to 127; 0 takes the default"},
    {.key = "compression.rank",
     .field = in_compression<&CompressionSection::rank>,
     .range = Range{0, 1 << 16},
     .default_text = "0 (4)",
     .doc = "powersgd: rank of each matrix's approximation; 0 takes the default"},
    {.key = "compression.warmup_steps",
     .field = in_compression<&CompressionSection::warmup_steps>,
     .range = Range{0, kSteps},
     .doc = "steps reduced exactly before compression starts; topk then ramps its ratio down from 1 over as "
            "many steps again, and powersgd its rank (the share of each matrix sent falls from 1 to rank "
            "`compression.rank`'s)"},
    {.key = "precision.compute",
     .field = in_precision<&PrecisionSection::compute>,
     .doc = "`\"bf16\"` or `\"fp16\"`: matmul inputs, saved activations and their gradients in 16 bits "
            "(activation memory about halves); master weights, gradients, optimizer state, softmax, norm "
            "statistics and the loss stay f32, and so does an MoE router (logits, top-k, gates, aux and z "
            "losses; `docs/moe.md`). The 16-bit matmul is oneDNN's bf16 GEMM where the CPU has bf16 dot "
            "products (`avx512_bf16`), else the inputs widened to f32 (same results, fp32 speed); the start "
            "line says which runs"},
    {.key = "precision.f32_gemm",
     .field = KindName{f32_gemm_of, set_f32_gemm},
     .doc = "the library of the float matmuls: `\"auto\"` (oneDNN's or OpenBLAS's sgemm, each with the "
            "products cut into blocks of 256 or 1024 rows, whichever runs the model's products fastest with the "
            "run's threads, measured at start-up and stored per machine and model shape beside the matmul peak, "
            "`float-gemm.json`; every rank takes the same; the start line says which and why), `\"onednn\"` or "
            "`\"openblas\"` (blocks of 256). The matmul peak MFU divides by is that of the GEMM chosen"},
    {.key = "precision.loss_scale",
     .field = WordOrNumber{in_precision<&PrecisionSection::loss_scale>},
     .doc = "fp16 only: `\"dynamic\"` (start at `precision.init_scale`, halve and skip the step on every rank "
            "when any gradient overflows, grow after `precision.growth_interval` finite steps), or a fixed "
            "scale (a number)"},
    {.key = "precision.init_scale",
     .field = in_precision<&PrecisionSection::init_scale>,
     .range = Range{.low = 1, .high = 1e30, .message = "{key} = {value} must be at least 1 (e.g. 65536)"},
     .doc = "fp16, dynamic: the first loss scale"},
    {.key = "precision.growth_interval",
     .field = in_precision<&PrecisionSection::growth_interval>,
     .range = Range{1, kSteps},
     .doc = "fp16, dynamic: finite steps in a row before the scale grows"},
    {.key = "precision.growth_factor",
     .field = in_precision<&PrecisionSection::growth_factor>,
     .range = Range{.low = 1, .high = 1e3, .message = "{key} = {value} must be at least 1 (e.g. 2)"},
     .doc = "fp16, dynamic: the scale's growth"},
    {.key = "precision.backoff_factor",
     .field = in_precision<&PrecisionSection::backoff_factor>,
     .range = Range{.low = 0, .high = 1, .low_open = true, .high_open = true,
                    .message = "{key} = {value} must be in (0, 1) (e.g. 0.5)"},
     .doc = "fp16, dynamic: the scale's cut after an overflow"},
    {.key = "memory.recompute",
     .field = KindName{recompute_of, set_recompute},
     .doc = "activation checkpointing: `\"none\"`; `\"full\"` (keep each block's input, recompute the block "
            "in backward: about one extra forward); `\"every_k\"` (keep one input per segment of "
            "`memory.recompute_every` blocks); `\"selective\"` (blocks drop their norm outputs and MLP "
            "activation, 2C + F values per token, and rebuild them in backward at the cost of elementwise "
            "passes); `\"optimal\"` (the fewest recomputations that fit `memory.activation_budget_mb`, by a "
            "dynamic program over measured per-block times and bytes); `\"dtr\"` (Dynamic Tensor "
            "Rematerialization's run-time rule within the same budget: evict the tensor with the least "
            "recompute cost per byte and staleness, rematerialize on demand; on a transformer's chain it "
            "evicts the blocks' norm outputs and MLP activation first, to be rebuilt in their backward; at five "
            "budgets on GPT-2 124M it recomputes 1.000 to 1.002 times what `\"checkmate\"` does; it thrashes near "
            "its least budget; it is there to show what planning buys; see docs/rematerialization.md and "
            "docs/benchmarks.md); `\"checkmate\"` (Checkmate's mixed-integer program over the chain's graph, "
            "each block split into the part selective recomputation rebuilds and the rest, so that it may keep "
            "some blocks selectively where Rotor reruns whole ones, within the same budget, solved with COIN-OR "
            "CBC under `memory.solver_seconds`, started from "
            "Rotor's schedule, cached in the run folder so a resumed run does not solve again, falling back "
            "to `\"optimal\"` and saying so when the solver finds nothing in time; see "
            "docs/rematerialization.md). Every policy gives bitwise the same losses and gradients"},
    {.key = "memory.recompute_every",
     .field = in_memory<&MemorySection::recompute_every>,
     .range = Range{0, 1 << 20},
     .doc = "`every_k`: blocks per segment; 0 means ⌈√n⌉ for the n blocks of each pipeline stage (⌈√L⌉ "
            "without a pipeline)"},
    {.key = "memory.offload_activations",
     .field = in_memory<&MemorySection::offload_activations>,
     .doc = "where the activations a unit keeps from its forward wait for its backward: `\"none\"` (in "
            "memory), `\"nvme\"` (every unit but the head writes them to the nvme tier, in "
            "`memory.offload_dir`, and reads them back ahead of its backward; bitwise the same run) or "
            "`\"auto\"` (with `memory.recompute = \"optimal\"`, one pipeline stage: which units to offload "
            "and which to recompute, planned together under `memory.activation_budget_mb` from the measured "
            "unit times and the offload folder's measured disk bandwidth)"},
    {.key = "memory.activation_encoding",
     .field = in_memory<&MemorySection::activation_encoding>,
     .doc = "the form kept activations wait in between a unit's forward and its backward (after Gist): "
            "`\"none\"`; `\"lossless\"` (a ReLU's input as one bit an element, a mostly-zero tensor as a "
            "bitmap and its non-zero values: bitwise the same run); `\"gist\"` (the lossless forms where they "
            "hold, f32 values as bf16 elsewhere); `\"fp8\"` (FP8 E4M3 with a scale per block of 128). "
            "Statistics and the head's stash stay as they are; offloading writes the encoded bytes; "
            "`metrics.jsonl`'s `memory.encoded_activations` gives the bytes before and after "
            "(docs/memory-tiers.md)"},
    {.key = "memory.offload_optimizer",
     .field = in_memory<&MemorySection::offload_optimizer>,
     .doc = "where the optimizer's state lives between steps: `\"none\"` (in memory) or `\"nvme\"` (in "
            "`memory.offload_dir`; each step streams it through memory in chunks, reading the next while one "
            "updates and writing the last back: bitwise the same run; checkpoints save and load it chunk by "
            "chunk, adafactor's and adam8bit's whole). adamw and sgd under any layout; the optimizers with "
            "per-tensor statistics (lamb, lars, adafactor, adam8bit) without ZeRO, tensor or expert sharding; "
            "not onebit_adam"},
    {.key = "memory.offload_params",
     .field = in_memory<&MemorySection::offload_params>,
     .doc = "where ZeRO-3's parameter and gradient shards live: `\"none\"` (in memory) or `\"nvme\"` (in "
            "`memory.offload_dir`; each unit's parameters are read in before it runs, the next unit's while "
            "it runs; each gradient bucket's part is written there as its reduction completes; the master "
            "values and gradients stream through memory with the optimizer state's chunks; the initial values "
            "are made there one parameter at a time: bitwise the same run; under sequence parallelism each "
            "part's gradients of the parameters tp does not split are summed over tp as it lands). Needs `parallel.zero_stage = 3` (at dp 1 the shard is the whole model) and "
            "`memory.offload_optimizer = \"nvme\"`; adamw or sgd; checkpoints, resumes and `train.init_from` "
            "read or write it one parameter at a time (with several ranks each parameter is gathered from the "
            "shards as the model file is written, and each rank keeps its part when loading), so a run larger "
            "than RAM saves and resumes; samples read it one parameter at a time at dp 1 and gather the whole "
            "model into memory with several ranks"},
    {.key = "memory.offload_chunk_mb",
     .field = in_memory<&MemorySection::offload_chunk_mb>,
     .range = Range{.low = 0.01f, .high = 1e6, .message = "{key} = {value} must be a size in MiB, at least 0.01"},
     .doc = "the optimizer state's chunk under `memory.offload_optimizer`: about this much of state moves at "
            "once (whole parameters); three chunks are in memory at most"},
    {.key = "memory.ram_budget_mb",
     .field = in_memory<&MemorySection::ram_budget_mb>,
     .range = Range{.low = 0, .high = 1e9,
                    .message = "{key} = {value} must be a size in MiB (0: the memory the machine has available)"},
     .doc = "what one process may hold in RAM, in MiB: a run whose predicted need (its memory peak, the "
            "process's own memory, the nvme tier's staging buffers) is larger is refused at start, naming the "
            "settings that would fit; 0: the memory the machine has available"},
    {.key = "memory.offload_dir",
     .field = in_memory<&MemorySection::offload_dir>,
     .doc = "the nvme tier's folder (it must exist; the run keeps its scratch files in a subfolder of its own "
            "and removes them at exit); `\"\"`: `<train.out_dir>/offload`, made when needed"},
    {.key = "memory.activation_budget_mb",
     .field = in_memory<&MemorySection::activation_budget_mb>,
     .range = Range{.low = 0, .high = 1e9, .message = "{key} = {value} must be a size in MiB (0 or more)"},
     .doc = "`optimal`, `dtr` and `checkmate`: the activation memory a microbatch may peak at, in MiB (a "
            "budget below the minimum is refused, naming it)"},
    {.key = "memory.solver_seconds",
     .field = in_memory<&MemorySection::solver_seconds>,
     .range = Range{.low = 0, .high = 86400,
                    .message = "{key} = {value} must be a time limit in seconds, 0 to 86400 (0: no branch and "
                               "bound, the LP relaxation rounded)"},
     .doc = "`checkmate`: CBC's time limit for each pipeline stage's solve, in seconds; past it the best "
            "schedule found runs, else the LP relaxation rounded, else `optimal`'s (0: round the relaxation "
            "at once)"},
    {.key = "checkpoint.every",
     .field = in_checkpoint<&CheckpointSection::every>,
     .range = Range{0, kSteps},
     .doc = "steps between checkpoints (0: only at the end)"},
    {.key = "checkpoint.at_end",
     .field = in_checkpoint<&CheckpointSection::at_end>,
     .doc = "write a checkpoint when the run has trained all its steps; `false` skips it (a run stopped by "
            "a signal, `train.max_minutes` or `train.exit_after` still writes one, to be resumed): for "
            "benchmarks and throwaway runs, e.g. a model whose checkpoint would not fit beside its nvme "
            "tier"},
    {.key = "checkpoint.keep",
     .field = in_checkpoint<&CheckpointSection::keep>,
     .range = Range{1, 1 << 20},
     .doc = "newest checkpoints kept"},
    {.key = "checkpoint.resume",
     .field = in_checkpoint<&CheckpointSection::resume>,
     .doc = "what to continue from: `\"latest\"` (this run's newest complete checkpoint), a run folder, its "
            "`checkpoints/` folder or a checkpoint folder (`step_…`); `\"auto\"` continues from the latest "
            "checkpoint when there is one and starts fresh otherwise (one command for requeued jobs); a "
            "finished run resumed exits 0 with \"nothing to do\""},
    {.key = "log.every",
     .field = in_log<&LogSection::every>,
     .range = Range{1, 1 << 30},
     .doc = "steps between log lines when stdout is not a terminal"},
    {.key = "log.peak_gflops",
     .field = in_log<&LogSection::peak_gflops>,
     .range = Range{.low = 0, .high = kFinite,
                    .message = "{key} = {value} must be 0 (calibrate) or the matmul GFLOP/s of one process"},
     .doc = "the matmul GFLOP/s of one process that MFU is measured against; 0: calibrated once per machine, "
            "thread count and float GEMM library and stored (`~/.cache/tessera/peak-flops.json`)"},
    {.key = "log.progress",
     .field = in_log<&LogSection::progress>,
     .doc = "`\"auto\"` (a progress bar on a terminal, plain lines otherwise), `\"bar\"` or `\"plain\"`; the "
            "bar fits the terminal's width, dropping the least important fields first"},
    {.key = "log.timeline",
     .field = in_log<&LogSection::timeline>,
     .doc = "write `timeline.json` in the run folder: when each instruction (forward, backward, transfer, "
            "optimizer step) of one step ran on each pipeline rank, in seconds from the step's start. The "
            "step recorded is the second this process runs (the first pays one-time costs), or its only one. "
            "`tessera simulate --timeline` draws it beside its simulation "
            "([docs/pipeline-schedules.md](docs/pipeline-schedules.md))"},
    {.key = "log.profile",
     .field = in_log<&LogSection::profile>,
     .doc = "time steps 2–4 of the run (its only step in a run of one) by category (GEMM, attention, norms, "
            "elementwise, casts, embedding, loss, communication, optimizer, other) and phase: a table at the "
            "end of the run and in the run folder's `profile.txt` (every rank's), and a Chrome trace "
            "`trace.json` with one row per rank, which Perfetto opens ([docs/profiling.md](docs/profiling.md))"},
  };
}

}  // namespace tessera::train
