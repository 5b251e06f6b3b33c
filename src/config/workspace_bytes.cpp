#include "config/workspace_bytes.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::config {

namespace {

// An MoE feed-forward's workspace (nn/moe.cpp) for N tokens on a rank of `ep` expert-parallel ranks
// holding El = E/ep experts, each with Rc = ep · capacity rows (its buffers are capacity-sized
// whatever the routing). k choices per token, `sent` <= N·k of them kept: the bound N·k is taken
// (the drops' few bytes of gate vectors aside, the peak is exact). The rows are in the compute
// dtype, the router's tensors f32:
//   forward:  the router's logits [N, E] (16-bit compute: beside the f32 copies of its input
//             [N, C] and weight [E, C]); then dispatch: send [N·k, C] and recv [El·Rc, C]; then
//             the experts' output [El·Rc, C] beside recv;
//   backward: the gates' gradient rows and scales (2 sent) and dgate [N, k], then send [N·k, C],
//             recv, dout and din [El·Rc, C] each, and one expert's dact and dpre [Rc, F] (SwiGLU:
//             also dup [Rc, F] and the up projection's dx [Rc, C]); after the experts, send, the
//             returned input gradients [N·k, C], the router's dprob [E], dlogits [N, E] and dx
//             [N, C] (16-bit compute: beside the f32 copies of its input and weight, which outweigh
//             the 16-bit dx it is rounded into after them).
struct MoeWorkspace {
  int64_t forward = 0, backward = 0;
};

MoeWorkspace moe_workspace_bytes(const ModelConfig& c, int64_t N, int ep, DType compute) {
  const int64_t C = c.n_embd, F = c.ffn(), E = c.moe_experts, k = c.moe_top_k, f32 = 4;
  const auto value = static_cast<int64_t>(dtype_size(compute));
  const int64_t El = E / ep, Rc = ep * c.moe_capacity(N), rows = El * Rc;
  const bool swiglu = c.gated_mlp();
  const int64_t gates = 3 * N * k, send = N * k * C;
  const int64_t router_copies = compute == DType::F32 ? 0 : N * C + E * C;
  MoeWorkspace w;
  w.forward = std::max({f32 * (N * E + router_copies), value * (send + rows * C), value * 2 * rows * C});
  const int64_t experts = f32 * gates + value * (send + 3 * rows * C + 2 * Rc * F + (swiglu ? Rc * F + Rc * C : 0));
  const int64_t router = f32 * (gates + E + N * E + N * C + router_copies) + value * 2 * send;
  w.backward = std::max(experts, router);
  return w;
}

}  // namespace

std::vector<UnitWorkspaceBytes> unit_workspace_bytes(const ModelConfig& c, int64_t B, int64_t T, int tp, bool sp,
                                                     DType compute, int ep) {
  // Workspace is what a backward passes down and its scratch (nn::StepContext::workspace); a
  // tensor lives as long as a reference to it, so each peak below lists the tensors alive at one
  // point of the modules' code (src/nn), in the compute dtype:
  //   R   the residual stream's gradient on this rank, [B, Ts, C] (Ts = T/t under sp, else T);
  //   Wh  a gradient of whole sequences, [B, T, C] (= R without sp);
  //   P   sequence parallelism's packed copy for a gather or reduce-scatter of more than one
  //       sequence, [t, B, Ts, C] (0 without sp, or for B = 1);
  //   Dr  the dropped-out copy of a branch's gradient, R with dropout, else 0 (the branch reads
  //       the gradient itself);
  //   Ft, Wq, W3  the MLP's hidden width F/t, attention's output width (H/t)·D and the qkv
  //       projection's (H + 2 Hkv)/t·D, per token of the whole sequences.
  // A block's backward holds its incoming gradient dy (R) throughout:
  //   MLP, under dy and its dropped-out copy (R + Dr):
  //     gathering the output gradient (sp)     Wh + P
  //     the projection's input gradient        Ft (beside the gathered Wh under sp)
  //     ungated: dact, dpre and fc's dx        2 Ft + Wh; SwiGLU: dact, dgate, dup, up's and gate's dx 3 Ft + 2 Wh
  //     reduce-scattering that dx (sp)         + R + P
  //   then dy, the MLP's result dh2 and norm2's dx1 (3R), and with attention's copy Dr:
  //     gathering (sp)                         Wh + P
  //     the projection's input gradient dout   Wq (beside the gathered Wh under sp)
  //     dout, dqkv and qkv's dx                Wq + W3 + Wh, reduce-scattered under sp: + R + P
  //   and last norm1's: dy, dh2, dx1, dh, dx   5R.
  // The head's backward starts from the logits' gradient (an activation): the projection's dx Wh,
  // reduce-scattered under sp (+ R + P), then the final norm's dx R beside it. The embedding's
  // backward holds dy and, under sp, gathers it whole (Wh + P). Forwards hold only P (sp), while a
  // gather or reduce-scatter packs the sequences.
  TS_CHECK(tp >= 1 && c.n_head % tp == 0 && c.kv_heads() % tp == 0 && c.ffn() % tp == 0,
           "workspace bytes for tp {} of a model with {} heads, {} key/value heads and an MLP width of {}", tp,
           c.n_head, c.kv_heads(), c.ffn());
  TS_CHECK(!sp || (tp > 1 && T % tp == 0), "workspace bytes under sequence parallelism need tp > 1 dividing T; got "
           "tp {}, T {}", tp, T);
  TS_CHECK(ep >= 1 && (c.moe_experts == 0 || c.moe_experts % ep == 0), "workspace bytes for ep {} of a model with {} "
           "experts", ep, c.moe_experts);
  const int64_t t = tp, C = c.n_embd;
  const auto value = static_cast<int64_t>(dtype_size(compute));
  const int64_t whole = B * T * value, part = B * (T / (sp ? t : 1)) * value;
  const int64_t R = C * part, Wh = C * whole;
  const int64_t P = sp && B > 1 ? C * whole : 0;
  const int64_t Dr = c.dropout > 0 ? R : 0;
  const int64_t Ft = c.ffn() / t * whole, Wq = c.n_head / t * c.head_dim() * whole, W3 = c.qkv_dim() / t * whole;
  const int64_t gathered = sp ? Wh : 0;
  const int64_t scattering = sp ? R + P : 0;
  const bool gated = c.gated_mlp();

  const int64_t mlp_base = R + Dr;
  const int64_t mlp = mlp_base + std::max({gathered + P, gathered + Ft,
                                           (gated ? 3 * Ft + 2 * Wh : 2 * Ft + Wh) + scattering});
  const int64_t attention_base = 3 * R + Dr;
  const int64_t attention = attention_base + std::max({gathered + P, gathered + Wq, Wq + W3 + Wh + scattering});
  const int64_t block = std::max({mlp, attention, 5 * R});

  // Before the MLP's backward lets go of its kept tensors: dy, its dropped-out copy, and the
  // gathered gradient or the projection's input gradient.
  const int64_t block_first_step = mlp_base + std::max(gathered + P, gathered + Ft);

  std::vector<UnitWorkspaceBytes> bytes;
  const int64_t embedding = R + gathered + P;
  bytes.push_back({.forward = P, .backward = embedding, .input_gradient = 0, .backward_beside_activations = embedding});
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.is_moe_layer(l)) {
      bytes.push_back({.forward = P, .backward = block, .input_gradient = R, .backward_beside_activations = block_first_step});
      continue;
    }
    // An MoE block: its feed-forward in place of the MLP's, under the same dy and dropped-out copy;
    // its routing buffers are taken beside every kept tensor. Under sp the layer routes the whole
    // sequences (nn/moe.h): its forward packs the gather and the reduce-scatter (P) on either side
    // of the routing; its backward gathers dy whole (Wh + P), routes beside it, and reduce-scatters
    // its whole dx (Wh) into R (+ P) once the gathered dy is gone.
    const MoeWorkspace moe = moe_workspace_bytes(c, B * T, ep, compute);
    const int64_t moe_forward = std::max(moe.forward, P);
    const int64_t moe_feed_forward =
        sp ? std::max({Wh + P, Wh + moe.backward, Wh + R + P}) : moe.backward;
    const int64_t moe_block = std::max({mlp_base + moe_feed_forward, attention, 5 * R});
    bytes.push_back({.forward = moe_forward, .backward = moe_block, .input_gradient = R,
                     .backward_beside_activations = moe_block});
  }
  const int64_t head = sp ? Wh + std::max(R + P, 2 * R) : Wh + R;
  bytes.push_back({.forward = P, .backward = head, .input_gradient = R, .backward_beside_activations = head});
  return bytes;
}

}  // namespace tessera::config
