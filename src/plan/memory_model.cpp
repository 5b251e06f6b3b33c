#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "optim/make_optimizer.h"
#include "plan/engine_memory.h"
#include "plan/model_costs.h"
#include "plan/moe_model.h"
#include "plan/recompute_model.h"

namespace tessera::plan {

using config::Architecture;
using config::ModelConfig;

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
// Gradient buckets of the data-parallel reduction: two of 25 MiB so one fills while the other
// is on the wire (PyTorch DDP's default bucket size).
constexpr double kGradBucketBytes = 2 * 25 * kMiB;
// Matmul library workspace (cuBLAS asks for up to 32 MiB on recent GPUs).
constexpr double kGemmWorkspaceBytes = 32 * kMiB;

double d(int64_t v) { return static_cast<double>(v); }
}  // namespace

double MemoryBreakdown::by_tag(std::string_view tag) const {
  if (tag == "params") return params;
  if (tag == "grads") return grads;
  if (tag == "optimizer") return optimizer;
  if (tag == "activations") return activations;
  if (tag == "comm") return comm;
  if (tag == "workspace") return workspace;
  if (tag == "weight_stash") return weight_stash;
  if (tag == "working_copies") return working_copies;
  TS_FAIL("plan: '{}' is not a memory tag; tags are params, grads, optimizer, activations, comm, workspace, "
          "weight_stash, working_copies", tag);
}

MemoryBreakdown model_state_bytes(double params, Precision precision, int zero, int dp, optim::OptimizerKind optimizer) {
  TS_CHECK(zero >= 0 && zero <= 3 && dp >= 1, "plan: ZeRO stage {} over dp={} is not valid", zero, dp);
  const double e = element_bytes(precision);
  optim::OptimizerConfig settings;
  settings.kind = optimizer;
  // fp32 master + the optimizer's state (Adam: m + v), or the state alone.
  const double K = (precision == Precision::Bf16 ? 4 : 0) + optim::state_bytes_per_parameter(settings);
  MemoryBreakdown mem;
  mem.params = e * params / (zero >= 3 ? dp : 1);
  mem.grads = e * params / (zero >= 2 ? dp : 1);
  mem.optimizer = K * params / (zero >= 1 ? dp : 1);
  return mem;
}

double layer_activation_bytes(const ModelConfig& m, int64_t b, int tp, bool sp, config::RecomputePolicy recompute, bool flash,
                              Precision precision) {
  const double s = m.seq_len, h = m.n_embd, a = m.n_head, F = m.ffn(), t = tp;
  const double e = element_bytes(precision);
  const double bsh = d(b) * s * h;
  const double bskv = d(b) * s * m.kv_dim();  // k or v: fewer heads under grouped-query attention
  const double R = bsh / (sp ? t : 1);  // a tensor of the replicated region, sharded over t by sp
  if (recompute == config::RecomputePolicy::Full) return e * R;  // only the layer input survives the forward
  const double mask = m.dropout > 0 ? 1.0 : 0.0;

  double bytes = 0;
  // Attention block.
  bytes += e * R;                      // norm_1 input
  bytes += e * R;                      // qkv input (the norm output; all-gathered again in backward with sp)
  bytes += e * (bsh + bskv) / t;       // q and k, inputs of QK^T (after rotary for llama)
  bytes += e * bskv / t;               // v, input of AV
  bytes += e * bsh / t;                // attention output, input of the output projection
  bytes += mask * R;                   // dropout mask after the projection
  if (flash) {
    bytes += 4 * d(b) * (a / t) * s;   // fp32 log-sum-exp per row, all a fused kernel keeps
  } else if (recompute != config::RecomputePolicy::Selective) {
    const double scores = d(b) * (a / t) * s * s;
    bytes += e * scores;               // softmax output, input of the score dropout
    if (mask > 0) bytes += (mask + e) * scores;  // dropout mask and dropout output (input of AV)
  }
  // MLP block.
  bytes += e * R;                      // norm_2 input
  bytes += e * R;                      // fc1 (gate, up) input
  if (!m.gated_mlp()) {
    bytes += 2 * e * d(b) * s * F / t;  // the activation's input and fc2 input
  } else {
    bytes += 3 * e * d(b) * s * F / t;  // gate output, up output, down input
  }
  bytes += mask * R;                   // dropout mask after fc2
  return bytes;
}

double stage_activation_bytes(const ModelConfig& m, const Layout& l, int stage, const PipelineModel& pipeline) {
  const int64_t b = l.micro_batch;
  // Activations: every chunk-microbatch in flight keeps its layers' saved tensors.
  const int64_t chunks = pipeline.inflight_chunks(l, stage);
  // Chunk 0 of each microbatch holds the embedding's tensors.
  const double microbatches = std::ceil(d(chunks) / l.virtual_stages);
  double bytes = 0;
  if (l.activations == ActivationAccounting::Engine || recompute_uses_chain(l.recompute)) {
    // The schedule's own numbers (recompute_model.h): each chunk-microbatch waiting for its
    // backward keeps R, and the one in backward peaks at P, recomputation included. This engine's
    // accounting always takes them from its chain, as the runtime does (exec::predict_activations).
    const memory::ChainSimulation sim = chunk_recompute(m, l, stage).simulation;
    bytes = d(chunks - 1) * d(sim.after_forward_bytes) + d(sim.peak_bytes);
  } else {
    // The closed forms, which the chain reproduces exactly (recompute_model.h): the same numbers,
    // without building a chain for each of the search's thousands of layouts.
    const double layers_per_chunk = static_cast<double>(m.n_layer) / (l.pp * l.virtual_stages);
    const double kept = layer_activation_bytes(m, b, l.tp, l.sp, l.recompute, l.flash_attention, l.precision);
    const double everything = layer_activation_bytes(m, b, l.tp, l.sp, config::RecomputePolicy::None, l.flash_attention, l.precision);
    bytes = d(chunks) * layers_per_chunk * kept;
    // The layer being recomputed and back-propagated holds its full set once more.
    bytes += everything - kept;
  }
  if (stage == 0) bytes += microbatches * embedding_activation_bytes(m, l);
  // Megatron's head tensors for the one microbatch whose backward starts right after its forward
  // (this engine's head is the last unit of the last stage's chain).
  if (stage == l.pp - 1) bytes += head_activation_bytes(m, l);
  return bytes;
}

MemoryBreakdown stage_memory(const ModelConfig& m, const Layout& l, int stage, const PipelineModel& pipeline) {
  if (l.states == StateAccounting::Engine) return engine_stage_memory(m, l, stage, pipeline);
  const int64_t b = l.micro_batch;
  const double e = element_bytes(l.precision);
  const double s = m.seq_len, h = m.n_embd, t = l.tp;
  const double bsh = d(b) * s * h;
  const bool last = stage == l.pp - 1;

  // ZeRO shards the dense parameters over dp and the experts over their own group, dp / ep.
  const double experts = moe_layers_in_stage(m, l, stage) * moe_expert_params_per_rank(m, l);
  MemoryBreakdown mem = model_state_bytes(stage_params(m, l, stage).total() - experts, l.precision, l.zero_stage, l.dp,
                                          l.optimizer);
  const MemoryBreakdown expert_states = model_state_bytes(experts, l.precision, l.zero_stage, l.dp / l.ep, l.optimizer);
  mem.params += expert_states.params;
  mem.grads += expert_states.grads;
  mem.optimizer += expert_states.optimizer;
  mem.activations = stage_activation_bytes(m, l, stage, pipeline);

  if (l.tp > 1) mem.comm += e * bsh;                      // gathered activation / all-reduce staging
  if (l.pp > 1) mem.comm += 2 * e * bsh / (l.sp ? t : 1);  // boundary tensor being sent and received
  if (l.dp > 1) {
    if (l.zero_stage == 3 && l.pp > 1) {
      // Under a pipeline the stage's weights stay gathered across its microbatches.
      mem.comm += e * stage_params(m, l, stage).total();
    } else if (l.zero_stage == 3) {
      mem.comm += 2 * e * layer_params_per_rank(m, l.tp);  // gathered weights: current layer and the prefetched next
    } else {
      mem.comm += std::min(kGradBucketBytes, mem.grads);
    }
  }

  double transient = 0;
  if (!l.flash_attention) transient = e * d(b) * (m.n_head / t) * s * s;     // raw scores before the softmax
  if (last) transient = std::max(transient, e * d(b) * s * std::ceil(m.vocab_size / t));  // bf16 logits
  mem.workspace = kGemmWorkspaceBytes + transient;
  return mem;
}

RankMemory peak_rank_memory(const ModelConfig& m, const Layout& l, const PipelineModel& pipeline) {
  RankMemory worst{stage_memory(m, l, 0, pipeline), 0};
  if (l.pp > 1) {
    MemoryBreakdown last = stage_memory(m, l, l.pp - 1, pipeline);
    if (last.total() > worst.memory.total()) worst = {last, l.pp - 1};
  }
  return worst;
}

}  // namespace tessera::plan
