#pragma once
// A layout as the planner sees it: the parallel layout every part of tessera shares, plus the
// choices the planner predicts with (recompute, precision, fused attention, overlap). Devices are
// numbered with tp innermost, then dp, then pp (Megatron's order), so a tensor-parallel group is
// a run of neighbouring devices and, when tp divides the node size, lives inside one node.
#include <cstdint>
#include <string>
#include <string_view>

#include "config/compression_method.h"
#include "config/model_config.h"
#include "config/parallel_layout.h"
#include "config/recompute_policy.h"
#include "optim/optimizer_config.h"
#include "plan/cluster.h"

namespace tessera::plan {

// Whose saved tensors the activations tag counts (plan/memory_model.h), and so what selective
// recomputation drops: this engine's norm outputs and MLP activation (Engine; what a run of
// memory.recompute = "selective" does), or the attention core's scores, softmax and dropout
// (Megatron, Korthikanti et al.'s selective recomputation, to hold against published runs).
enum class ActivationAccounting {
  Engine,    // this engine's, unit by unit (config::unit_activation_bytes): what a tessera run measures
  Megatron,  // Megatron-LM's, as Korthikanti et al. 2022 derive them: to hold against published runs
};

// What selective recomputation reruns in each layer's backward, by the accounting: Megatron's
// (Korthikanti et al.) reruns the attention core, QK^T, softmax, dropout and AV, unless a fused
// kernel never stored it; this engine's reruns its norms and the MLP's activation, what a run of
// memory.recompute = "selective" does (memory/unit_chain.h).
enum class SelectiveRebuild { Nothing, AttentionCore, NormsAndActivation };

// Whose model states, buffers and workspace the other tags count (plan/memory_model.h,
// plan/engine_memory.h).
enum class StateAccounting {
  Zero,    // mixed-precision training as ZeRO (Rajbhandari et al. 2020) counts it: 16-bit weights and
           // gradients, fp32 master and Adam state, DDP's gradient buckets and a matmul library's
           // workspace; what the published comparisons use
  Engine,  // this engine's allocations, tag by tag as its allocator measures them (f32 master weights
           // and gradients of the whole model on every rank, 16-bit working copies, its buckets and
           // workspace): what `tessera plan --config` predicts for a run
};

// Derived rather than holding a ParallelLayout: the planner reads l.tp, l.dp, l.pp everywhere, and
// a plan::Layout passes unchanged wherever the shared layout is wanted (the pipeline generators,
// the pipeline model, a mesh), so what the planner predicts is exactly what would run.
struct Layout : config::ParallelLayout {
  config::RecomputePolicy recompute = config::RecomputePolicy::None;
  Precision precision = Precision::Bf16;
  bool flash_attention = false;  // fused attention that never stores the s x s scores (Megatron accounting;
                                 // this engine's attention is always tiled)
  ActivationAccounting activations = ActivationAccounting::Engine;
  bool overlap = false;          // data-parallel / ZeRO collectives overlap backward (and ZeRO-3 gathers, forward)
  // every_k's segment length; 0 picks ceil(sqrt(layers of a model chunk)), the runtime's default
  // for the layers it holds. Only every_k reads it.
  int recompute_every = 0;
  // optimal: the activation peak one microbatch may reach on a rank, in MiB (the peak of one model
  // chunk's chain plus the embedding's and head's tensors of that stage). Only optimal reads it,
  // and optimal needs it: there is no budget that would be right for every device.
  double activation_budget_mb = 0;
  // Gradient compression of the data-parallel reduction (plan/compression_model.h): none, topk
  // (compression_ratio of the elements), qsgd, onebit or powersgd (compression_rank).
  config::CompressionMethod compression = config::CompressionMethod::None;
  double compression_ratio = 0.01;
  int compression_rank = 4;
  // The optimizer whose state the memory model counts (optim.name); Adam's moments by default.
  optim::OptimizerKind optimizer = optim::OptimizerKind::AdamW;
  StateAccounting states = StateAccounting::Zero;
  // The runtime's gradient bucket size (parallel.bucket_mb, MiB), which sizes ZeRO-2/3's bucket
  // storage (only the engine accounting reads that) and the last bucket of a reduction between nodes.
  double bucket_mb = 25.0;
  // ZeRO-3's gradient shard is in the nvme tier (memory.offload_params): a reduced bucket waits for
  // its write there instead of for the count of buckets in flight (parallel/gradient_reducer.h).
  bool gradients_to_nvme = false;
  // Bytes per element of the dense data-parallel gradient messages (parallel.grad_dtype: 2 for bf16
  // or f16); 0: the precision's element size.
  double grad_message_bytes = 0;

  int64_t devices() const { return int64_t{dp} * tp * pp; }  // widened: device counts are multiplied further
  bool operator==(const Layout&) const = default;
};

std::string_view accounting_name(ActivationAccounting a);  // "engine", "megatron"
std::string_view accounting_name(StateAccounting a);       // "zero", "engine"
// Nothing unless l.recompute is selective.
SelectiveRebuild selective_rebuild(const Layout& l);

// "tp=8,pp=2,dp=32,v=2,mb=1,zero=1,recompute=full,sp=true,precision=bf16": keys tp, pp, dp, v
// (virtual_stages), mb, gb, zero (zero_stage), recompute (none, selective, full, every_k, optimal),
// recompute_every, activation_budget_mb, sp, precision, schedule (any kind name), flash, overlap,
// optimizer (an optim.name; written only when not adamw), activations (engine or megatron; written
// only when megatron), states (zero or engine) and bucket_mb (both written only when states=engine).
// Keys not given keep their value in `base`. v > 1 with the 1f1b schedule (the
// default) means interleaved 1F1B, so a layout that names no schedule keeps its meaning; the result
// then says schedule=interleaved. Unknown keys and bad values throw with the list of known keys.
Layout parse_layout(std::string_view text, Layout base = {});
// The same syntax; parse_layout(to_string(l)) == l for every layout check_layout accepts.
// recompute_every and activation_budget_mb are written only when set, so layouts that do not use
// them print as they always did.
std::string to_string(const Layout& l);

// Throws tessera::Error naming the problem and the fix: device count, divisibility of heads, FFN,
// layers and batch, interleaving and ZeRO constraints, schedules the cost model does not describe,
// recompute_every and activation_budget_mb given without the policy that reads them, optimal
// without a budget. (Whether a budget is large enough depends on the chain: the memory model
// refuses one below the minimum, naming it.)
void check_layout(const config::ModelConfig& model, const Layout& layout, int64_t devices);

}  // namespace tessera::plan
