#pragma once
// A mixture-of-experts feed-forward layer (Switch Transformer for k = 1, GShard for k = 2), the
// MLP of every model.moe_every-th block when model.moe_experts > 0:
//
//   logits = x · Wrᵀ                [N, E] f32 (router, no bias)
//   route: probs, the k choices of each token, their gates, the slot each choice takes in its
//          expert (at most capacity = ceil(cf · N · k / E) per expert; the rest are dropped)
//   dispatch: the rows of the kept choices to their experts' ranks      (all-to-all)
//   expert e: y_e = MLP_e(rows)    (model.activation, as the dense MLP, width F)
//   combine: the outputs back to their tokens' ranks                     (all-to-all)
//   y[n] = Σ_kept choices j  gate[n, j] · y_{e_j}[n]                    [N, C]
//
// A dropped choice adds nothing: the block's residual carries the token past the layer. The
// capacity is counted per microbatch on the rank that holds it (a group in GShard's terms), so
// the routing of a token does not depend on the layout.
//
// The router's own losses join the gradient, for each microbatch of N tokens, as
//   grad_scale · N · (aux_coef · aux + z_coef · z)
// (aux and z as in kernels/cpu/moe_router.h): with grad_scale = 1 / (tokens of the global batch),
// that is the mean over microbatches of the per-microbatch losses, summed over the MoE layers,
// as in Switch. They are reported, not added to the language-model loss.
//
// Under mixed precision (precision.compute = "bf16" or "fp16") the routing is f32 and the rest is
// in the compute dtype: the router's logits (from the widened 16-bit input and weight copy), its
// softmax, top-k choice, gates and the aux and z losses, and their gradients, are f32, so that a
// token's experts do not turn on 16-bit rounding; the rows sent to the experts, the experts'
// matmuls (on their 16-bit working copies, like every dense weight), the rows coming back and the
// all-to-all of expert parallelism are 16-bit. Every parameter gradient accumulates in f32, and
// fp16's loss scale reaches the router's own losses through grad_scale like the token loss.
//
// Expert weights are stacked, [E, F, C] for the first projection, so expert parallelism splits
// dimension 0 over the ep group like any other sharded parameter (nn/parameters.h ShardSpec); a
// rank runs the experts of its block, E_l = E / P of them. The router is replicated. Under tensor
// parallelism the experts are not split: every rank of the tp group runs all its experts on the
// whole tokens (the layer sits outside the tensor-parallel region).
//
// Shapes: N = B·T tokens, C n_embd, F ffn, E experts, E_l this rank's, k choices, P ep ranks,
// R = P · capacity rows of one local expert's buffer (the most it can receive).
#include <string>
#include <vector>

#include "config/model_config.h"
#include "nn/linear.h"

namespace tessera::nn {

// What the routing of the training forwards of one step did, summed over MoE layers and
// microbatches (and, once the engine has reduced it, over data-parallel ranks).
struct MoeStatistics {
  int64_t assignments = 0;    // token choices routed: N · k per layer and microbatch
  int64_t dropped = 0;        // of those, beyond their expert's capacity
  std::vector<int64_t> load;  // [E] rows each expert took
  double aux_loss_sum = 0;    // Σ aux over (layer, microbatch)
  double z_loss_sum = 0;      // Σ z over (layer, microbatch)
  int64_t routings = 0;       // (layer, microbatch) pairs
  // Rows the dispatch sent to experts on other ranks (each also comes back in the combine, and
  // both go again, as gradients, in the backward): the expert-parallel traffic.
  int64_t remote_rows = 0;
  void add(const MoeStatistics& other);
};

class MoeFeedForward {
 public:
  MoeFeedForward() = default;
  MoeFeedForward(ParameterStore& store, const std::string& name, const config::ModelConfig& config);

  struct Ctx {
    Linear::Ctx router;     // inp: x [N, C]
    Tensor probs, lse;      // [N, E], [N] f32
    Tensor choice, slot;    // [N, k] i32 (slot -1: dropped)
    Tensor gate;            // [N, k] f32
    Tensor sent_token;      // [N·k] i32: the token of each row sent, rows by (expert, slot); first `sent` valid
    Tensor sent_choice;     // [N·k] i32: n·k + j of that row
    Tensor returned;        // [N·k, C]: the expert output of each row sent, back here
    Tensor in, pre, up, act;  // [E_l·R, C], [E_l·R, F] ×3 (up: SwiGLU only): the local experts' rows
    std::vector<int64_t> send_rows, recv_rows;  // [P] rows to / from each member
    std::vector<int32_t> recv_load;             // [P·E_l] rows member s sends local expert e
    std::vector<int64_t> expert_rows;           // [E_l] rows each local expert received
    int64_t sent = 0;
    float grad_scale = 1.0f;  // the microbatch's (StepContext::grad_scale at the forward)
    // Kept by the input half of a split backward for the weight half, beside router.inp, in and
    // act: the gradients of the local experts' outputs [E_l·R, C], of their first projections
    // [E_l·R, F] (and of up, SwiGLU), and of the router's logits [N, E] f32.
    Tensor dout, dpre, dup, dlogits;
    template <class F>
    void for_each_tensor(F&& f) const {
      router.for_each_tensor(f);
      for (const Tensor* t : {&choice, &slot, &sent_token, &sent_choice, &returned, &in, &pre, &up, &act, &dout,
                              &dpre, &dup, &dlogits}) {
        f(*t, SavedUse::Values);
      }
      // The router's: its gradient reads them, and they are small.
      for (const Tensor* t : {&probs, &lse, &gate}) f(*t, SavedUse::Statistics);
    }
  };
  // x [B, Ts, C] -> [B, Ts, C] (Ts: the part of the sequence the residual stream holds, T without
  // sequence parallelism). Training forwards keep in ctx what the backward reads; evaluation keeps
  // nothing.
  //
  // Under sequence parallelism the layer routes the whole sequence, as it does under tensor
  // parallelism without it (its experts are replicated over tp): it gathers the sequence as a
  // region's entry does, runs on every rank of the group, and leaves the region with 1/t of its
  // output as each rank's partial sum, which the exit's reduce-scatter adds back to the output's
  // part (exact: t is a power of two). So the router sees every token of the microbatch and
  // capacity, drops and the balancing losses are those of one process; each rank's weight
  // gradients are 1/t of the whole, which the sequence-parallel sum of replicated gradients adds
  // up. (Megatron-LM instead routes each rank's part and counts capacity over it.)
  Tensor forward(StepContext& step, Ctx& ctx, const Tensor& x);
  // dy [B, T, C] -> dx [B, T, C] (input half and both; undefined for the weight half); the
  // parameters' gradients +=. Split as Linear splits (zero-bubble's B and W): the input half runs
  // the whole exchange, dispatching the experts' output gradients and combining their input
  // gradients, and the router's input gradient; it keeps the gradients the experts' matrices and
  // the router's read (Ctx::dout, dpre, dup, dlogits) beside the rows each expert saw (in, act) and
  // the router's input. The weight half forms every weight and bias gradient from them: local
  // arithmetic, no exchange. Both: the same bits as the two halves.
  Tensor backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);

 private:
  // The layer on the whole sequence: x [B, T, C] -> [B, T, C], and its backward.
  Tensor routed_forward(StepContext& step, Ctx& ctx, const Tensor& x);
  Tensor routed_backward(StepContext& step, Ctx& ctx, const Tensor& dy, BackwardPart part);
  int experts_here() const { return static_cast<int>(fc_w_->shape[0]); }
  // The local experts' rows between `received` (rows by member, then expert, as the exchange
  // delivers them) and the padded expert-major buffer `experts` [E_l·R, X]: into the experts'
  // buffer, or back out of it.
  void move_rows(const Tensor& experts, const Tensor& received, const Ctx& ctx, bool into_experts) const;
  void exchange(StepContext& step, const Tensor& send, std::span<const int64_t> send_rows, const Tensor& recv,
                std::span<const int64_t> recv_rows) const;
  // The weight half: every parameter gradient from what the input half kept.
  void backward_weight(StepContext& step, Ctx& ctx) const;

  config::ModelConfig config_;
  config::Activation activation_ = config::Activation::Gelu;
  bool swiglu_ = false;  // gated: a third weight, up
  Linear router_;  // C -> E
  // Stacked expert weights [E_l, F, C] (fc; SwiGLU: gate), [E_l, F, C] (up), [E_l, C, F] (proj; down);
  // biases (model.bias) [E_l, F] (fc; gate), [E_l, F] (up), [E_l, C] (proj; down).
  const Parameter* fc_w_ = nullptr;
  const Parameter* fc_b_ = nullptr;
  const Parameter* up_w_ = nullptr;
  const Parameter* up_b_ = nullptr;
  const Parameter* proj_w_ = nullptr;
  const Parameter* proj_b_ = nullptr;
};

}  // namespace tessera::nn
