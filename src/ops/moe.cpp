#include "ops/moe.h"

#include <type_traits>

#include "kernels/cpu/moe_router.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

namespace {
struct RouterShape {
  int N, E, k;
};

RouterShape router_shape(const OpCall& call, const Tensor& probs, const Tensor& choice) {
  call.rank(probs, "probs", 2, "[N, E]");
  call.rank(choice, "choice", 2, "[N, k]");
  TS_CHECK(choice.size(0) == probs.size(0), "{}: choice has shape {}, expected [N={}, k] (N from probs)", call.op(),
           choice.shape_string(), probs.size(0));
  return {call.to_int(probs.size(0), "N"), call.to_int(probs.size(1), "E"), call.to_int(choice.size(1), "k")};
}

// The router is f32 (its kernels are float and double only): other dtypes are refused by name.
template <class T, class F>
void router_kernel(const OpCall& call, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    f();
  } else {
    TS_FAIL("{}: the router runs in f32; its tensors must be f32", call.op());
  }
}
}  // namespace

void moe_route(const Tensor& probs, const Tensor& lse, const Tensor& choice, const Tensor& gate, const Tensor& slot,
               std::span<int32_t> load, const Tensor& logits, int capacity) {
  OpCall call("ops::moe_route", ProfileCategory::Elementwise);
  call.operands({{logits, "logits"}, {probs, "probs"}, {lse, "lse"}, {gate, "gate"}})
      .indices(choice, "choice")
      .indices(slot, "slot");
  const RouterShape s = router_shape(call, probs, choice);
  call.same_shape(logits, "logits", probs, "probs");
  call.same_shape(gate, "gate", choice, "choice");
  call.same_shape(slot, "slot", choice, "choice");
  call.shape(lse, "lse", {{"N", s.N, "probs"}});
  TS_CHECK(static_cast<int64_t>(load.size()) == s.E, "{}: load holds {} experts, the logits {}", call.op(),
           load.size(), s.E);
  TS_CHECK(s.k >= 1 && s.k <= s.E && capacity >= 0, "{}: k {} of {} experts with capacity {}", call.op(), s.k, s.E,
           capacity);
  call.dispatch([&]<class T>(Cpu<T>) {
    router_kernel<T>(call, [&] {
      kernels::moe_route<float>(probs.data<float>(), lse.data<float>(), choice.data<int32_t>(), gate.data<float>(),
                                slot.data<int32_t>(), load.data(), logits.data<float>(), s.N, s.E, s.k, capacity);
    });
  });
}

double moe_aux_loss(const Tensor& dprob, const Tensor& probs, const Tensor& choice) {
  OpCall call("ops::moe_aux_loss", ProfileCategory::Loss);
  call.operands({{probs, "probs"}}).optional(dprob, "dprob").indices(choice, "choice");
  const RouterShape s = router_shape(call, probs, choice);
  if (dprob.defined()) call.shape(dprob, "dprob", {{"E", s.E, "probs"}});
  double loss = 0;
  call.dispatch([&]<class T>(Cpu<T>) {
    router_kernel<T>(call, [&] {
      loss = kernels::moe_aux_loss<float>(detail::data_or_null<float>(dprob), probs.data<float>(),
                                          choice.data<int32_t>(), s.N, s.E, s.k);
    });
  });
  return loss;
}

double moe_z_loss(const Tensor& lse) {
  OpCall call("ops::moe_z_loss", ProfileCategory::Loss);
  call.operands({{lse, "lse"}});
  call.rank(lse, "lse", 1, "[N]");
  double loss = 0;
  call.dispatch([&]<class T>(Cpu<T>) {
    router_kernel<T>(call, [&] { loss = kernels::moe_z_loss<float>(lse.data<float>(), call.to_int(lse.size(0), "N")); });
  });
  return loss;
}

void moe_router_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& lse, const Tensor& choice,
                         const Tensor& dgate, const Tensor& dprob, float aux_coef, float z_coef) {
  OpCall call("ops::moe_router_backward", ProfileCategory::Elementwise);
  call.operands({{dlogits, "dlogits"}, {probs, "probs"}, {lse, "lse"}, {dgate, "dgate"}})
      .optional(dprob, "dprob")
      .indices(choice, "choice");
  const RouterShape s = router_shape(call, probs, choice);
  call.same_shape(dlogits, "dlogits", probs, "probs");
  call.same_shape(dgate, "dgate", choice, "choice");
  call.shape(lse, "lse", {{"N", s.N, "probs"}});
  TS_CHECK(aux_coef == 0.0f || dprob.defined(), "{}: an aux loss coefficient {} without dprob", call.op(), aux_coef);
  if (dprob.defined()) call.shape(dprob, "dprob", {{"E", s.E, "probs"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    router_kernel<T>(call, [&] {
      kernels::moe_router_backward<float>(dlogits.data<float>(), probs.data<float>(), lse.data<float>(),
                                          choice.data<int32_t>(), dgate.data<float>(),
                                          detail::data_or_null<float>(dprob), aux_coef, z_coef, s.N, s.E, s.k);
    });
  });
}

namespace {
// R, C of a row move between a [R, C] tensor and a [N, C] one through rows [R].
std::pair<size_t, size_t> row_move(const OpCall& call, const Tensor& packed, const char* packed_name,
                                   const Tensor& full, const char* full_name, const Tensor& rows) {
  call.rank(packed, packed_name, 2, "[R, C]");
  call.rank(full, full_name, 2, "[N, C]");
  call.shape(rows, "rows", {{"R", packed.size(0), packed_name}});
  TS_CHECK(full.size(1) == packed.size(1), "{}: {} has shape {}, expected [N, C={}] (C from {})", call.op(),
           full_name, full.shape_string(), packed.size(1), packed_name);
  const int64_t N = full.size(0);
  const int32_t* r = rows.data<int32_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) {
    TS_CHECK(r[i] >= 0 && r[i] < N, "{}: rows[{}] = {} is outside the {} rows of {}", call.op(), i, r[i], N,
             full_name);
  }
  return {static_cast<size_t>(packed.size(0)), static_cast<size_t>(packed.size(1))};
}
}  // namespace

void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale) {
  OpCall call("ops::gather_rows", ProfileCategory::Embedding);
  call.operands({{out, "out"}, {x, "x"}}).optional_accumulator(scale, "scale").indices(rows, "rows");
  const auto [R, C] = row_move(call, out, "out", x, "x", rows);
  if (scale.defined()) call.shape(scale, "scale", {{"R", static_cast<int64_t>(R), "out"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::gather_rows<T>(out.data<T>(), x.data<T>(), rows.data<int32_t>(),
                            detail::data_or_null<compute_t<T>>(scale), R, C);
  });
}

void scatter_add_rows(const Tensor& y, const Tensor& src, const Tensor& rows, const Tensor& scale) {
  OpCall call("ops::scatter_add_rows", ProfileCategory::Embedding);
  call.operands({{y, "y"}, {src, "src"}}).optional_accumulator(scale, "scale").indices(rows, "rows");
  const auto [R, C] = row_move(call, src, "src", y, "y", rows);
  if (scale.defined()) call.shape(scale, "scale", {{"R", static_cast<int64_t>(R), "src"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::scatter_add_rows<T>(y.data<T>(), src.data<T>(), rows.data<int32_t>(),
                                 detail::data_or_null<compute_t<T>>(scale), R, C);
  });
}

void gathered_row_dots(const Tensor& dscale, const Tensor& dy, const Tensor& src, const Tensor& rows) {
  OpCall call("ops::gathered_row_dots", ProfileCategory::Embedding);
  call.operands({{dy, "dy"}, {src, "src"}}).accumulators({{dscale, "dscale"}}).indices(rows, "rows");
  const auto [R, C] = row_move(call, src, "src", dy, "dy", rows);
  call.shape(dscale, "dscale", {{"R", static_cast<int64_t>(R), "src"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::gathered_row_dots<T>(dscale.data<compute_t<T>>(), dy.data<T>(), src.data<T>(), rows.data<int32_t>(), R, C);
  });
}

}  // namespace tessera::ops
