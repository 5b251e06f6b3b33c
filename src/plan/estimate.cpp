#include "plan/estimate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "plan/collectives.h"
#include "plan/compression_model.h"
#include "plan/device_time.h"
#include "plan/engine_memory.h"
#include "plan/moe_model.h"
#include "plan/recompute_model.h"

namespace tessera::plan {

using config::ModelConfig;

namespace {

// Adam touches, per parameter of its shard: read gradient, master weight, m and v; write master
// weight, m and v (4 bytes each) and the bf16 weight copy, or in fp32 the weight itself: 28 bytes.
constexpr double kOptimizerBytesPerParam = 28;

struct StageTime {
  double forward = 0, backward = 0;        // compute, recompute included in backward
  double forward_tp = 0, backward_tp = 0;  // collectives, recompute's included in backward
};

// Embedding lookup (first stage) and the output layer with the loss (last stage), per microbatch.
StageTime edge_time(const ModelConfig& m, const Layout& l, const ClusterSpec& c, const Placement& groups, bool first, bool last) {
  StageTime t;
  const Precision p = l.precision;
  const double e = element_bytes(p);
  const double b = l.micro_batch, s = m.seq_len, h = m.n_embd, tp = l.tp;
  const double bsh = b * s * h, R = bsh / (l.sp ? tp : 1);
  const double mask = m.dropout > 0 ? 1.0 : 0.0;
  if (first) {
    // Gather rows of the vocab-parallel table, add positions, dropout; the partial rows are summed
    // over the tp group (reduce-scattered with sp).
    const double bytes = 2 * e * bsh + (3 * e + mask) * R;
    t.forward += stream_seconds(c, bytes);
    t.backward += stream_seconds(c, kBackwardStreamTraffic * bytes);
    t.forward_tp += l.sp ? reduce_scatter_seconds(groups.tp, e * bsh) : all_reduce_seconds(groups.tp, e * bsh);
  }
  if (last) {
    const double vocab = std::ceil(m.vocab_size / tp);
    const Gemm logits{"logits", static_cast<int64_t>(b * s), static_cast<int64_t>(vocab), m.n_embd};
    const Stream final_norm{"final_norm", 2 * e * R, StreamKind::Norm, R};
    t.forward += stream_seconds(c, final_norm, false) + gemm_seconds(c, p, logits);
    t.backward += stream_seconds(c, final_norm, true) + gemm_backward_seconds(c, p, logits);
    // Cross-entropy in fp32 over the vocab shard: read logits, write probabilities, one reduction
    // pass; backward reads probabilities and writes the logit gradient. Where the cluster measured
    // this engine's kernel, which computes the gradient in the forward, its cost per logit.
    const double logit_values = b * s * vocab;
    if (c.efficiency.kernels.cross_entropy > 0) {
      t.forward += std::max(stream_seconds(c, (e + 8) * logit_values) + stream_seconds(c, (4 + e) * logit_values),
                            c.efficiency.kernels.cross_entropy * logit_values + c.efficiency.kernel_overhead);
    } else {
      t.forward += stream_seconds(c, (e + 8) * logit_values);
      t.backward += stream_seconds(c, (4 + e) * logit_values);
    }
    // The head's input is gathered (sp) or its gradient all-reduced; the loss needs three small
    // all-reduces of per-token values (max, sum, target logit).
    const double per_token = 4 * b * s;
    t.forward_tp += 3 * all_reduce_seconds(groups.tp, per_token) + (l.sp ? all_gather_seconds(groups.tp, e * bsh) : 0);
    t.backward_tp += l.sp ? reduce_scatter_seconds(groups.tp, e * bsh) : all_reduce_seconds(groups.tp, e * bsh);
  }
  return t;
}

// What this engine's gradient reduction between nodes adds to a step. Its buckets are posted as
// backward completes them, so the link carries them only during `window`, the part of backward
// after the first bucket is complete (the head's backward and the last blocks' come first); what
// it adds is the part of the reduction that window does not hide, never less than the last bucket
// (`tail`), which backward's end completes. Where the link was measured busy
// (Group::busy_bandwidth, compute_slowdown), the bytes cross at the busy bandwidth during the
// window, which runs slower while they do, and what is left after it crosses at the idle
// bandwidth; the slowdown is part of what the reduction adds.
double engine_reduction_exposed(const Group& dp, double bytes, double window, double tail) {
  const double idle = all_reduce_seconds(dp, bytes);
  if (dp.busy_bandwidth <= 0 && dp.compute_slowdown == 1) return std::max(idle - window, tail);
  Group busy = dp;
  if (dp.busy_bandwidth > 0) busy.link.bandwidth = dp.busy_bandwidth;
  const double during = all_reduce_seconds(busy, bytes);  // the whole reduction at the busy rate
  const double slowed = window * dp.compute_slowdown;     // the window with the transfers beside it
  if (during <= slowed) {
    // All of it crosses during the window, which runs at 1/slowdown of its speed while it does.
    return during * (1 - 1 / dp.compute_slowdown) + tail;
  }
  const double left = (1 - slowed / during) * idle;  // the share that crosses after backward
  return (slowed - window) + std::max(left, tail);
}

// The part of one stage's backward (pp = 1) during which its gradient buckets are posted: after
// the head's backward and the blocks' that the first bucket waits for; none where the whole
// gradient is one bucket. The blocks' share is backward less the two ends, evenly per block.
double backward_after_first_bucket(const ModelConfig& m, const Layout& l, const ClusterSpec& c,
                                   const Placement& groups, double backward) {
  const int units = m.n_layer + 2;  // the embedding, the blocks, the head (engine_memory.h)
  const int before = engine_units_before_first_bucket(m, l);
  if (before >= units) return 0;
  const StageTime head = edge_time(m, l, c, groups, false, true), embedding = edge_time(m, l, c, groups, true, false);
  const double head_backward = head.backward + head.backward_tp;
  const double per_block = std::max(0.0, backward - head_backward - embedding.backward - embedding.backward_tp) / m.n_layer;
  return std::max(0.0, backward - head_backward - (before - 1) * per_block);
}

}  // namespace

RankMemory estimate_memory(const ModelConfig& m, const Layout& l, const PipelineModel& pipeline) {
  return peak_rank_memory(m, l, pipeline);
}

Estimate estimate(const ModelConfig& m, const Layout& l, const ClusterSpec& cluster, const PipelineModel& pipeline) {
  check_layout(m, l, l.devices());
  TS_CHECK(cluster.max_devices() == 0 || l.devices() <= cluster.max_devices(),
           "plan: the layout needs {} devices but cluster '{}' has {} ({} nodes of {})", l.devices(), cluster.name,
           cluster.max_devices(), cluster.max_nodes, cluster.devices_per_node);
  // On a host cluster the ranks of a node share its cores and memory: the device one rank sees.
  const ClusterSpec c = process_view(cluster, cluster.devices_on_a_node(l.devices()));
  const double share = process_share(cluster, cluster.devices_on_a_node(l.devices())).share;
  Estimate est;
  est.layout = l;
  est.memory = peak_rank_memory(m, l, pipeline);
  est.memory_capacity = c.usable_memory();
  est.fits = est.memory.memory.total() <= est.memory_capacity;

  const Placement groups = place(l, c);
  const LayerTime layer = layer_time(m, l, c, groups);
  const double layers_per_stage = static_cast<double>(m.n_layer / l.pp);
  StageTime body;
  body.forward = layers_per_stage * layer.forward;
  body.backward = layers_per_stage * (layer.backward + layer.recompute);
  body.forward_tp = layers_per_stage * layer.forward_tp;
  body.backward_tp = layers_per_stage * (layer.backward_tp + layer.recompute_tp);

  // The slowest stage sets the pace: the first (embedding) or the last (output layer and loss).
  StageTime slowest;
  double slowest_total = -1;
  // Compute (forward and backward) of every stage together, for time-sliced hosts below: the
  // first and the last as computed here, the others hold only layers.
  double stages_compute = l.pp > 2 ? (l.pp - 2) * (body.forward + body.backward) : 0.0;
  for (int stage : l.pp == 1 ? std::vector<int>{0} : std::vector<int>{0, l.pp - 1}) {
    StageTime edge = edge_time(m, l, c, groups, stage == 0, stage == l.pp - 1);
    StageTime st{body.forward + edge.forward, body.backward + edge.backward, body.forward_tp + edge.forward_tp,
                 body.backward_tp + edge.backward_tp};
    // MoE blocks: their experts beyond a dense MLP, and expert parallelism's all-to-alls.
    const MoeLayerTime moe = moe_layer_extra_time(m, l, c, groups);
    const double moe_layers = moe_layers_in_stage(m, l, stage);
    st.forward += moe_layers * moe.forward;
    st.backward += moe_layers * moe.backward;
    st.forward_tp += moe_layers * moe.forward_comm;
    st.backward_tp += moe_layers * moe.backward_comm;
    if (recompute_uses_chain(l.recompute)) {
      // every_k and optimal rerun the layer forwards their schedule says; an optimal schedule can
      // differ between stages, whose budgets leave different room beside the embedding and head.
      const StageRecomputation rerun = stage_recomputation(m, l, stage);
      st.backward += rerun.layer_forwards * layer.forward + rerun.rebuilt_layers * layer.rebuild;
      st.backward_tp += rerun.layer_forwards * layer.forward_tp;
    }
    stages_compute += st.forward + st.backward;
    double total = st.forward + st.backward + st.forward_tp + st.backward_tp;
    if (total > slowest_total) {
      slowest = st;
      slowest_total = total;
    }
  }

  const double mb = static_cast<double>(l.microbatches());
  const double e = element_bytes(l.precision);
  StageTimes st;
  st.forward = slowest.forward + slowest.forward_tp;
  st.backward = slowest.backward + slowest.backward_tp;
  if (l.pp > 1) {
    // Boundary activations: with sp they are already sharded over tp; without, each tp rank sends
    // its 1/t share and the receiving group all-gathers it (Megatron's scatter/gather).
    const double boundary = e * l.micro_batch * static_cast<double>(m.seq_len) * m.n_embd;
    st.p2p = p2p_seconds(groups.pp, boundary / l.tp);
    if (!l.sp && l.tp > 1) st.p2p += all_gather_seconds(groups.tp, boundary);
  }

  // Data parallelism and ZeRO. By default their collectives do not overlap compute (Megatron's
  // 2021 all-reduce after the last backward, DeepSpeed's default for ZeRO-1/2); with overlap the
  // gradient reduction hides behind the last microbatch's backward and ZeRO-3's gathers behind
  // the compute of the microbatch that needs them.
  const double rank_params = std::max(stage_params(m, l, 0).total(), stage_params(m, l, l.pp - 1).total());
  const double grad_bytes = e * rank_params;
  auto hidden = [&](double comm, double compute) { return l.overlap ? std::max(0.0, comm - compute) : comm; };
  // ZeRO-2 and -3 move weights and gradients layer by layer as compute reaches them: one
  // collective per layer, each paying the ring latency.
  auto per_layer = [&](double (*collective)(const Group&, double), double bytes) {
    return layers_per_stage * collective(groups.dp, bytes / layers_per_stage);
  };
  double per_microbatch_exposed = 0;  // ZeRO-2/3 traffic of every microbatch left on the critical path
  double dp_exposed = 0;
  // A compressor replaces the gradient reduction (all-reduce or reduce-scatter) of each window:
  // once a step under stages 0-1, every microbatch under 2-3; it is synchronous (never hidden).
  const int rank_stage = stage_params(m, l, 0).total() >= stage_params(m, l, l.pp - 1).total() ? 0 : l.pp - 1;
  const double compressed = compressed_reduction_seconds(l, c, groups.dp, rank_params, stage_matrices(m, l, rank_stage));
  const bool compressing = compressed > 0;
  // Dense gradient messages in 16 bits (parallel.grad_dtype): the runtime's exchange (an all-to-all
  // of the rounded bucket, then an all-gather of the sums) moves what a ring all-reduce of the
  // 16-bit gradient does.
  const double message_bytes = (l.grad_message_bytes > 0 ? l.grad_message_bytes : e) * rank_params;
  // And 16-bit messages cost the cores passes that f32 ones do not (parallel/gradient_reducer.cpp),
  // bytes a gradient element over a group of n: each bucket rounded before its all-to-all (6); the
  // members' chunks summed from zero where this rank's part lies (4/n, then 10); under stage 0 that
  // part rounded for the all-gather (6/n) and the gathered sums widened back (6). Every stage runs
  // them once a reduction, with the wait for it.
  const bool messages_16_bit = l.grad_message_bytes > 0 && l.grad_message_bytes < 4 && !compressing && l.dp > 1;
  auto conversion_seconds = [&](double elements) {
    if (!messages_16_bit) return 0.0;
    const double n = l.dp;
    return stream_seconds(c, (16 + 4 / n + (l.zero_stage == 0 ? 6 + 6 / n : 0)) * elements);
  };
  // This engine's dense reduction between nodes: the network carries it while the cores run
  // backward, since each bucket is posted as backward completes it (parallel/gradient_reducer.h).
  // All of it can pass behind backward but the last bucket, which backward's last action (the
  // embedding's) completes. Within a node the same copies take the cores backward runs on.
  const bool engine_between_nodes =
      l.states == StateAccounting::Engine && groups.dp.crosses_nodes && l.pp == 1 && !compressing;
  if (l.dp > 1) {
    switch (l.zero_stage) {
      case 0:
        if (compressing) {
          dp_exposed = compressed;
        } else if (engine_between_nodes) {
          const double tail = all_reduce_seconds(groups.dp, message_bytes * engine_last_bucket_elements(m, l) / rank_params);
          const double window = backward_after_first_bucket(m, l, c, groups, st.backward);
          dp_exposed = engine_reduction_exposed(groups.dp, message_bytes, window, tail);
        } else {
          dp_exposed = hidden(all_reduce_seconds(groups.dp, message_bytes), st.backward);
        }
        dp_exposed += conversion_seconds(rank_params);
        break;
      case 1:
        dp_exposed = (compressing ? compressed : hidden(reduce_scatter_seconds(groups.dp, message_bytes), st.backward)) +
                     all_gather_seconds(groups.dp, grad_bytes) + conversion_seconds(rank_params);
        break;
      case 2:
        // Without the whole gradient kept, every microbatch's gradients are reduce-scattered.
        per_microbatch_exposed = compressing ? compressed
                                             : hidden(per_layer(reduce_scatter_seconds, message_bytes), st.backward) +
                                                   conversion_seconds(rank_params);
        dp_exposed = all_gather_seconds(groups.dp, grad_bytes);
        break;
      default:
        if (l.pp > 1) {
          // Under a pipeline each unit stays gathered across the microbatches: the weights are
          // all-gathered once a step, and the gradients reduce-scattered every microbatch as under
          // ZeRO-2.
          per_microbatch_exposed = compressing ? compressed
                                               : hidden(per_layer(reduce_scatter_seconds, message_bytes), st.backward) +
                                                     conversion_seconds(rank_params);
          dp_exposed = all_gather_seconds(groups.dp, grad_bytes);
          break;
        }
        // Stage 3 gathers the weights for forward and again for backward, and reduce-scatters the
        // gradients, every microbatch (1.5x the traffic of plain data parallelism).
        per_microbatch_exposed =
            hidden(per_layer(all_gather_seconds, grad_bytes), st.forward) +
            (compressing ? hidden(per_layer(all_gather_seconds, grad_bytes), st.backward) + compressed
                         : hidden(per_layer(all_gather_seconds, grad_bytes) + per_layer(reduce_scatter_seconds, message_bytes),
                                  st.backward) +
                               conversion_seconds(rank_params));
    }
  }
  if (l.pp > 1 && m.tied_embeddings) {
    // The first and last stages hold the tied table; their gradients are summed once per step.
    const double table = e * std::ceil(m.vocab_size / static_cast<double>(l.tp)) * m.n_embd;
    dp_exposed += all_reduce_seconds(Group{2, groups.pp}, table);
  }

  est.microbatch = st;
  double makespan = pipeline.makespan(l, st) + mb * per_microbatch_exposed;
  TimeBreakdown& t = est.time;
  t.compute = mb * (slowest.forward + slowest.backward);
  if (share < 1) {
    // More processes than cores, time-sliced (share s): a work-conserving scheduler keeps every
    // core busy while enough processes are runnable, so a pipeline's idle ranks lend their cores
    // to the busy ones. The step is the longer of the machine's cores running every rank's work
    // (each stage's compute as sliced here, tensor-parallel and pipeline transfers as they are)
    // and the schedule's critical path with each process alone on its cores.
    StageTimes alone = st;
    alone.forward = share * slowest.forward + slowest.forward_tp;
    alone.backward = share * slowest.backward + slowest.backward_tp;
    const double critical = pipeline.makespan(l, alone) + mb * per_microbatch_exposed;
    t.compute = mb * stages_compute / l.pp;
    const double shared = t.compute + mb * (slowest.forward_tp + slowest.backward_tp + 2 * l.virtual_stages * st.p2p) +
                          mb * per_microbatch_exposed;
    makespan = std::max(critical, shared);
  }
  t.tp_comm = mb * (slowest.forward_tp + slowest.backward_tp);
  t.pp_comm = l.pp > 1 ? mb * 2 * l.virtual_stages * st.p2p : 0;
  t.dp_comm = dp_exposed + mb * per_microbatch_exposed;
  t.bubble = makespan - mb * per_microbatch_exposed - t.compute - t.tp_comm - t.pp_comm;
  if (t.bubble < 0) {
    // A pipeline model that overlaps transfers with compute (the simulator) hides part of them.
    t.pp_comm = std::max(0.0, t.pp_comm + t.bubble);
    t.bubble = 0;
  }
  if (t.bubble < 1e-12 * makespan) t.bubble = 0;  // rounding
  const double shard = rank_params / (l.zero_stage >= 1 ? l.dp : 1);
  t.optimizer = stream_seconds(c, kOptimizerBytesPerParam * shard + grad_bytes / (l.zero_stage >= 2 ? l.dp : 1));
  // Where the cluster measured this engine's step per parameter (norm, clipping, update, zeroing).
  t.optimizer = std::max(t.optimizer, c.efficiency.kernels.optimizer * shard + c.efficiency.kernel_overhead);
  t.step = makespan + dp_exposed + t.optimizer;

  // step_flops counts selective as Megatron does, rerunning the attention core; this engine's
  // selective reruns norms and an activation, which the FLOPs leave out as they leave out every
  // bandwidth-bound kernel, so its FLOPs are none's.
  const config::RecomputePolicy counted =
      selective_rebuild(l) == SelectiveRebuild::NormsAndActivation ? config::RecomputePolicy::None : l.recompute;
  est.flops = recompute_uses_chain(l.recompute)
                  ? step_flops(m, l.global_batch, l.recompute, l.flash_attention, model_recomputed_layer_forwards(m, l))
                  : step_flops(m, l.global_batch, counted, l.flash_attention);
  const double busy = t.compute + t.tp_comm + t.pp_comm;
  est.bubble_fraction = busy > 0 ? t.bubble / busy : 0;
  const double devices = static_cast<double>(l.devices());
  const double peak = c.peak_flops(l.precision);
  est.tflops_per_device = est.flops.hardware() / t.step / devices / 1e12;
  est.mfu = est.flops.model() / (t.step * devices * peak);
  est.hfu = est.flops.hardware() / (t.step * devices * peak);
  est.tokens_per_second = static_cast<double>(l.global_batch) * m.seq_len / t.step;
  return est;
}

}  // namespace tessera::plan
