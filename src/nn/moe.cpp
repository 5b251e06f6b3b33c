#include "nn/moe.h"

#include <cmath>

#include "nn/mlp.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/moe.h"

namespace tessera::nn {

void MoeStatistics::add(const MoeStatistics& other) {
  assignments += other.assignments;
  dropped += other.dropped;
  if (load.size() < other.load.size()) load.resize(other.load.size(), 0);
  for (size_t e = 0; e < other.load.size(); ++e) load[e] += other.load[e];
  aux_loss_sum += other.aux_loss_sum;
  z_loss_sum += other.z_loss_sum;
  routings += other.routings;
  remote_rows += other.remote_rows;
}

MoeFeedForward::MoeFeedForward(ParameterStore& store, const std::string& name, const config::ModelConfig& config)
    : config_(config), activation_(config.mlp_activation()), swiglu_(config.gated_mlp()) {
  const int64_t E = config.moe_experts, C = config.n_embd, F = config.ffn();
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  router_ = Linear(store, name + ".router", static_cast<int>(C), static_cast<int>(E), false, 0.02f);
  const std::string experts = name + ".experts.";
  constexpr ParameterPart kExpert = ParameterPart::Expert;
  fc_w_ = &store.declare(experts + (swiglu_ ? "gate" : "fc") + ".weight", {E, F, C}, ParameterRole::Weight, Init::Normal,
                         0.02f, kExpert);
  if (swiglu_) {
    up_w_ = &store.declare(experts + "up.weight", {E, F, C}, ParameterRole::Weight, Init::Normal, 0.02f, kExpert);
  }
  if (config.bias) fc_b_ = &store.declare(experts + "fc.bias", {E, F}, ParameterRole::Bias, Init::Zeros, 0.0f, kExpert);
  if (config.bias && swiglu_) {
    up_b_ = &store.declare(experts + "up.bias", {E, F}, ParameterRole::Bias, Init::Zeros, 0.0f, kExpert);
  }
  proj_w_ = &store.declare(experts + (swiglu_ ? "down" : "proj") + ".weight", {E, C, F}, ParameterRole::Weight,
                           Init::Normal, residual_std, kExpert);
  if (config.bias) proj_b_ = &store.declare(experts + "proj.bias", {E, C}, ParameterRole::Bias, Init::Zeros, 0.0f, kExpert);
}

namespace {
// Expert e of a stacked parameter [E_l, ...]: its [...] block.
Tensor expert_block(const Tensor& stacked, int64_t e) {
  Shape rest(stacked.shape().begin() + 1, stacked.shape().end());
  return stacked.slice(0, e, e + 1).reshape(rest);
}

Tensor i32(StepContext& step, int64_t n, MemoryTag tag) { return Tensor::empty({n}, DType::I32, tag, step.memory); }

// t in f32: itself when it is f32, else a widened copy in workspace.
Tensor in_f32(StepContext& step, const Tensor& t) {
  if (t.dtype() == DType::F32) return t;
  Tensor wide = step.workspace(t.shape(), DType::F32);
  ops::widen(wide, t);
  return wide;
}
}  // namespace

void MoeFeedForward::exchange(StepContext& step, const Tensor& send, std::span<const int64_t> send_rows,
                              const Tensor& recv, std::span<const int64_t> recv_rows) const {
  if (step.experts == nullptr) {
    recv.slice(0, 0, send_rows[0]).copy_from(send.slice(0, 0, send_rows[0]));
    return;
  }
  step.experts->exchange_rows(send, send_rows, recv, recv_rows);
}

void MoeFeedForward::move_rows(const Tensor& experts, const Tensor& received, const Ctx& ctx, bool into_experts) const {
  // `received` holds, member by member, the rows of each local expert; expert e's buffer holds
  // them member by member from its own offset e·R.
  const int El = experts_here(), P = static_cast<int>(ctx.recv_rows.size());
  const int64_t R = experts.size(0) / El;
  int64_t at = 0;
  std::vector<int64_t> filled(static_cast<size_t>(El), 0);
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < El; ++e) {
      const int64_t n = ctx.recv_load[static_cast<size_t>(s * El + e)];
      const int64_t row = e * R + filled[static_cast<size_t>(e)];
      if (n > 0) {
        Tensor mine = experts.slice(0, row, row + n), theirs = received.slice(0, at, at + n);
        if (into_experts) {
          mine.copy_from(theirs);
        } else {
          theirs.copy_from(mine);
        }
      }
      filled[static_cast<size_t>(e)] += n;
      at += n;
    }
  }
}

Tensor MoeFeedForward::forward(StepContext& step, Ctx& ctx, const Tensor& x) {
  const int parts = step.sequence_shard().parts;
  if (parts == 1) return routed_forward(step, ctx, x);
  Tensor y = routed_forward(step, ctx, step.enter_region(x));
  ops::scale(y, y, 1.0f / static_cast<float>(parts));
  // The router's losses, which the backward adds to every rank's gradients, take the same share.
  ctx.grad_scale /= static_cast<float>(parts);
  return step.leave_region(y);
}

Tensor MoeFeedForward::backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part) {
  const int parts = step.sequence_shard().parts;
  if (parts == 1 || part == BackwardPart::Weight) return routed_backward(step, ctx, dy, part);
  Tensor dx;
  {
    Tensor whole = step.leave_region_backward(dy);
    ops::scale(whole, whole, 1.0f / static_cast<float>(parts));
    dx = routed_backward(step, ctx, whole, part);
  }  // the gathered gradient goes before the reduce-scatter packs dx
  return step.enter_region_backward(dx);
}

Tensor MoeFeedForward::routed_forward(StepContext& step, Ctx& ctx, const Tensor& x_in) {
  const int64_t C = config_.n_embd, F = config_.ffn(), E = config_.moe_experts, k = config_.moe_top_k;
  const int64_t N = x_in.numel() / C;
  const Tensor x = x_in.reshape({N, C});
  const int P = step.experts != nullptr ? step.experts->ranks() : 1;
  const int El = experts_here();
  TS_CHECK(int64_t{El} * P == E, "MoE layer: {} experts here on each of {} expert-parallel ranks, but the model has {}",
           El, P, E);
  const int64_t capacity = config_.moe_capacity(N), R = P * capacity;

  // The router runs in f32 whatever the compute dtype, so that which expert a token goes to does not
  // turn on 16-bit rounding of its logits (Megatron-LM's fp32 router): the 16-bit input and weight
  // copy are widened, exactly, and their products summed in f32. The input stays saved in 16 bits.
  Tensor logits = step.workspace({N, E}, DType::F32);
  ops::linear_forward(logits, in_f32(step, x), in_f32(step, step.weight(router_.weight())), Tensor());
  ctx.router.inp = x;
  ctx.grad_scale = step.grad_scale;
  ctx.probs = step.statistics({N, E});
  ctx.lse = step.statistics({N});
  ctx.gate = step.statistics({N, k});
  ctx.choice = Tensor::empty({N, k}, DType::I32, MemoryTag::Activations, step.memory);
  ctx.slot = Tensor::empty({N, k}, DType::I32, MemoryTag::Activations, step.memory);
  std::vector<int32_t> load(static_cast<size_t>(E));
  ops::moe_route(ctx.probs, ctx.lse, ctx.choice, ctx.gate, ctx.slot, load, logits, static_cast<int>(capacity));
  logits = Tensor();

  // The rows to send, by expert then slot: expert e's rows start at the sum of the loads before it.
  std::vector<int64_t> first(static_cast<size_t>(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) first[static_cast<size_t>(e) + 1] = first[static_cast<size_t>(e)] + load[static_cast<size_t>(e)];
  ctx.sent = first.back();
  ctx.sent_token = i32(step, N * k, MemoryTag::Activations);
  ctx.sent_choice = i32(step, N * k, MemoryTag::Activations);
  {
    const int32_t* choice = ctx.choice.data<int32_t>();
    const int32_t* slot = ctx.slot.data<int32_t>();
    int32_t* token = ctx.sent_token.data<int32_t>();
    int32_t* which = ctx.sent_choice.data<int32_t>();
    std::fill(token, token + N * k, 0);
    std::fill(which, which + N * k, 0);
    for (int64_t i = 0; i < N * k; ++i) {
      if (slot[i] < 0) continue;
      const int64_t row = first[static_cast<size_t>(choice[i])] + slot[i];
      token[row] = static_cast<int32_t>(i / k);
      which[row] = static_cast<int32_t>(i);
    }
  }
  if (step.moe_statistics != nullptr) {
    MoeStatistics& stats = *step.moe_statistics;
    if (stats.load.empty()) stats.load.assign(static_cast<size_t>(E), 0);
    for (int64_t e = 0; e < E; ++e) stats.load[static_cast<size_t>(e)] += load[static_cast<size_t>(e)];
    stats.assignments += N * k;
    stats.dropped += N * k - ctx.sent;
    stats.aux_loss_sum += ops::moe_aux_loss(Tensor(), ctx.probs, ctx.choice);
    stats.z_loss_sum += ops::moe_z_loss(ctx.lse);
    stats.routings += 1;
  }

  // Counts: the rows for member r are those of its experts [r·E_l, (r+1)·E_l).
  ctx.send_rows.assign(static_cast<size_t>(P), 0);
  for (int r = 0; r < P; ++r) ctx.send_rows[static_cast<size_t>(r)] = first[static_cast<size_t>((r + 1) * El)] - first[static_cast<size_t>(r * El)];
  ctx.recv_load.assign(static_cast<size_t>(P * El), 0);
  if (step.experts != nullptr) {
    step.experts->exchange_counts(load, ctx.recv_load);
  } else {
    ctx.recv_load = load;
  }
  ctx.recv_rows.assign(static_cast<size_t>(P), 0);
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < El; ++e) ctx.recv_rows[static_cast<size_t>(s)] += ctx.recv_load[static_cast<size_t>(s * El + e)];
  }
  if (step.moe_statistics != nullptr) {
    const int me = step.experts != nullptr ? step.experts->rank() : 0;
    step.moe_statistics->remote_rows += ctx.sent - ctx.send_rows[static_cast<size_t>(me)];
  }

  // Dispatch.
  Tensor send = step.workspace({N * k, C});
  ops::gather_rows(send.slice(0, 0, ctx.sent), x, ctx.sent_token.slice(0, 0, ctx.sent));
  Tensor recv = step.workspace({R * El, C});
  exchange(step, send, ctx.send_rows, recv, ctx.recv_rows);
  send = Tensor();
  ctx.in = step.activation({El * R, C});
  move_rows(ctx.in, recv, ctx, true);

  // The local experts, each on its rows.
  ctx.pre = step.activation({El * R, F});
  if (swiglu_) ctx.up = step.activation({El * R, F});
  ctx.act = step.activation({El * R, F});
  Tensor out = step.workspace({El * R, C});
  ctx.expert_rows.assign(static_cast<size_t>(El), 0);
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < El; ++e) ctx.expert_rows[static_cast<size_t>(e)] += ctx.recv_load[static_cast<size_t>(s * El + e)];
  }
  const Tensor W1 = step.weight(*fc_w_), W2 = step.weight(*proj_w_);
  for (int e = 0; e < El; ++e) {
    const int64_t n = ctx.expert_rows[static_cast<size_t>(e)];
    if (n == 0) continue;
    const int64_t lo = e * R, hi = lo + n;
    const Tensor pre = ctx.pre.slice(0, lo, hi), act = ctx.act.slice(0, lo, hi), in = ctx.in.slice(0, lo, hi);
    ops::linear_forward(pre, in, expert_block(W1, e), fc_b_ ? expert_block(step.weight(*fc_b_), e) : Tensor());
    Tensor up;
    if (swiglu_) {
      up = ctx.up.slice(0, lo, hi);
      ops::linear_forward(up, in, expert_block(step.weight(*up_w_), e),
                          up_b_ ? expert_block(step.weight(*up_b_), e) : Tensor());
    }
    activation_forward(activation_, act, pre, up);
    ops::linear_forward(out.slice(0, lo, hi), act, expert_block(W2, e),
                        proj_b_ ? expert_block(step.weight(*proj_b_), e) : Tensor());
  }

  // Combine.
  move_rows(out, recv, ctx, false);
  out = Tensor();
  ctx.returned = step.activation({N * k, C});
  exchange(step, recv, ctx.recv_rows, ctx.returned, ctx.send_rows);
  recv = Tensor();
  Tensor scale = step.workspace({std::max<int64_t>(ctx.sent, 1)}, DType::F32);
  {
    const float* gate = ctx.gate.data<float>();
    const int32_t* which = ctx.sent_choice.data<int32_t>();
    float* s = scale.data<float>();
    for (int64_t r = 0; r < ctx.sent; ++r) s[r] = gate[which[r]];
  }
  Tensor y = Tensor::zeros(x_in.shape(), x_in.dtype(), MemoryTag::Activations, step.memory);  // [B, T, C]
  ops::scatter_add_rows(y.reshape({N, C}), ctx.returned.slice(0, 0, ctx.sent), ctx.sent_token.slice(0, 0, ctx.sent),
                        scale.slice(0, 0, ctx.sent));
  if (!step.training) ctx = Ctx{};
  return y;
}

Tensor MoeFeedForward::routed_backward(StepContext& step, Ctx& ctx, const Tensor& dy_in, BackwardPart part) {
  if (part == BackwardPart::Weight) {
    backward_weight(step, ctx);
    return Tensor();
  }
  // Under a split backward the input half leaves every weight gradient to the weight half, keeping
  // what it reads; Both forms them here from the same operands, in the same kernels (ops/linear.h:
  // the halves give the bits of the whole).
  const bool split = part == BackwardPart::Input;
  const int64_t C = config_.n_embd, F = config_.ffn(), E = config_.moe_experts, k = config_.moe_top_k;
  const int64_t N = dy_in.numel() / C;
  const Tensor dy = dy_in.reshape({N, C});
  const int El = experts_here();
  const int64_t R = ctx.in.size(0) / El;
  const Tensor sent_token = ctx.sent_token.slice(0, 0, ctx.sent);

  // The gates' gradients, and the experts' output gradients gate · dy sent to the experts.
  Tensor dgate_rows = step.workspace({std::max<int64_t>(ctx.sent, 1)}, DType::F32);
  Tensor scale = step.workspace({std::max<int64_t>(ctx.sent, 1)}, DType::F32);
  ops::gathered_row_dots(dgate_rows.slice(0, 0, ctx.sent), dy, ctx.returned.slice(0, 0, ctx.sent), sent_token);
  Tensor dgate = Tensor::zeros({N, k}, DType::F32, MemoryTag::Workspace, step.memory);
  {
    const float* gate = ctx.gate.data<float>();
    const int32_t* which = ctx.sent_choice.data<int32_t>();
    const float* d = dgate_rows.data<float>();
    float* dg = dgate.data<float>();
    float* s = scale.data<float>();
    for (int64_t r = 0; r < ctx.sent; ++r) {
      dg[which[r]] = d[r];
      s[r] = gate[which[r]];
    }
  }
  ctx.returned = Tensor();
  Tensor send = step.workspace({N * k, C});
  ops::gather_rows(send.slice(0, 0, ctx.sent), dy, sent_token, scale.slice(0, 0, ctx.sent));
  Tensor recv = step.workspace({R * El, C});
  exchange(step, send, ctx.send_rows, recv, ctx.recv_rows);
  Tensor dout = step.workspace({El * R, C});
  move_rows(dout, recv, ctx, true);

  // The experts' backward, each on its rows. A split backward keeps every expert's dpre (and dup)
  // for the weight half; the whole one needs one expert's at a time.
  Tensor din = step.workspace({El * R, C});
  {
    Tensor dact = step.workspace({R, F});
    Tensor dpre = step.workspace({split ? El * R : R, F});
    Tensor dup = swiglu_ ? step.workspace({split ? El * R : R, F}) : Tensor();
    Tensor din_up = swiglu_ ? step.workspace({R, C}) : Tensor();
    // A stacked weight, and under Both its gradient targets.
    struct Stacked {
      Tensor w, dw, db;
    };
    const auto stacked = [&](const Parameter* w, const Parameter* b) {
      if (w == nullptr) return Stacked{};
      return Stacked{step.weight(*w), split ? Tensor() : step.grad(*w), b && !split ? step.grad(*b) : Tensor()};
    };
    const Stacked fc = stacked(fc_w_, fc_b_), up_proj = stacked(up_w_, up_b_), proj = stacked(proj_w_, proj_b_);
    // Expert e's dx = d · w, and under Both its dw, db += from d and its rows x.
    const auto product = [&](const Tensor& dx, const Stacked& p, int e, const Tensor& d, const Tensor& x) {
      if (split) {
        ops::linear_backward_input(dx, d, expert_block(p.w, e));
        return;
      }
      ops::linear_backward(dx, expert_block(p.dw, e), p.db.defined() ? expert_block(p.db, e) : Tensor(), d, x,
                           expert_block(p.w, e));
    };
    for (int e = 0; e < El; ++e) {
      const int64_t n = ctx.expert_rows[static_cast<size_t>(e)];
      if (n == 0) continue;
      const int64_t lo = e * R, hi = lo + n;
      const int64_t at = split ? lo : 0;  // this expert's rows of dpre and dup
      const Tensor pre = ctx.pre.slice(0, lo, hi), act = ctx.act.slice(0, lo, hi), in = ctx.in.slice(0, lo, hi);
      const Tensor da = dact.slice(0, 0, n), dp = dpre.slice(0, at, at + n);
      product(da, proj, e, dout.slice(0, lo, hi), act);
      const Tensor up = swiglu_ ? ctx.up.slice(0, lo, hi) : Tensor(), du = swiglu_ ? dup.slice(0, at, at + n) : Tensor();
      activation_backward(activation_, dp, du, da, pre, up);
      if (swiglu_) product(din_up.slice(0, 0, n), up_proj, e, du, in);
      product(din.slice(0, lo, hi), fc, e, dp, in);
      if (swiglu_) ops::add_inplace(din.slice(0, lo, hi), din_up.slice(0, 0, n));
    }
    if (split) {
      ctx.dout = dout;
      ctx.dpre = dpre;
      ctx.dup = dup;
    }
  }
  ctx.pre = ctx.up = Tensor();
  if (!split) ctx.in = ctx.act = Tensor();
  dout = Tensor();
  move_rows(din, recv, ctx, false);
  din = Tensor();
  Tensor din_rows = step.workspace({N * k, C});
  exchange(step, recv, ctx.recv_rows, din_rows, ctx.send_rows);
  recv = Tensor();

  // The router: gates, load balancing and z-loss, weighted as this microbatch's share of the
  // objective (see the header).
  const float weight = ctx.grad_scale * static_cast<float>(N);
  const float aux_coef = config_.moe_aux_loss_coef * weight, z_coef = config_.moe_z_loss_coef * weight;
  Tensor dprob = aux_coef != 0.0f ? step.workspace({E}, DType::F32) : Tensor();
  if (dprob.defined()) ops::moe_aux_loss(dprob, ctx.probs, ctx.choice);
  Tensor dlogits = step.workspace({N, E}, DType::F32);
  ops::moe_router_backward(dlogits, ctx.probs, ctx.lse, ctx.choice, dgate, dprob, aux_coef, z_coef);
  // The router's backward in f32, as its forward; its input gradient joins the experts' in the
  // compute dtype. Its weight gradient is a weight half's like the experts' (a split backward keeps
  // dlogits, N·E floats, and the router's input for it).
  const Parameter& router_weight = router_.weight();
  Tensor dx = step.workspace({N, C}, DType::F32);
  if (split) {
    ops::linear_backward_input(dx, dlogits, in_f32(step, step.weight(router_weight)));
  } else {
    ops::linear_backward(dx, step.grad(router_weight), Tensor(), dlogits, in_f32(step, ctx.router.inp),
                         in_f32(step, step.weight(router_weight)));
  }
  if (step.compute != DType::F32) {
    Tensor narrowed = step.workspace({N, C});
    ops::narrow(narrowed, dx);
    dx = narrowed;
  }
  ops::scatter_add_rows(dx, din_rows.slice(0, 0, ctx.sent), sent_token);
  if (split) {
    // What the weight half reads; the routing is done with.
    Ctx kept;
    kept.router.inp = ctx.router.inp;
    kept.in = ctx.in;
    kept.act = ctx.act;
    kept.dout = ctx.dout;
    kept.dpre = ctx.dpre;
    kept.dup = ctx.dup;
    kept.dlogits = dlogits;
    kept.expert_rows = std::move(ctx.expert_rows);
    ctx = std::move(kept);
  } else {
    ctx = Ctx{};
  }
  return dx.reshape(dy_in.shape());
}

void MoeFeedForward::backward_weight(StepContext& step, Ctx& ctx) const {
  TS_CHECK(ctx.dout.defined() && ctx.dlogits.defined(),
           "MoE backward: the weight half ran before the input half kept the experts' and the router's gradients");
  const int El = experts_here();
  const int64_t R = ctx.in.size(0) / El;
  for (int e = 0; e < El; ++e) {
    const int64_t n = ctx.expert_rows[static_cast<size_t>(e)];
    if (n == 0) continue;
    const int64_t lo = e * R, hi = lo + n;
    const auto weight_gradient = [&](const Parameter* w, const Parameter* b, const Tensor& d, const Tensor& x) {
      ops::linear_backward_weight(expert_block(step.grad(*w), e), b ? expert_block(step.grad(*b), e) : Tensor(),
                                  d.slice(0, lo, hi), x.slice(0, lo, hi));
    };
    weight_gradient(proj_w_, proj_b_, ctx.dout, ctx.act);
    if (swiglu_) weight_gradient(up_w_, up_b_, ctx.dup, ctx.in);
    weight_gradient(fc_w_, fc_b_, ctx.dpre, ctx.in);
  }
  ops::linear_backward_weight(step.grad(router_.weight()), Tensor(), ctx.dlogits, in_f32(step, ctx.router.inp));
  ctx = Ctx{};
}

}  // namespace tessera::nn
