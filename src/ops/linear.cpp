#include "ops/linear.h"

#include "kernels/cpu/linear.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::data_or_null;
using detail::OpCall;

void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  OpCall call("ops::linear_forward", ProfileCategory::Gemm);
  call.operands({{y, "y"}, {x, "x"}, {w, "w"}}).optional(b, "b");
  call.rank(w, "w", 2, "[OC, IC]");
  const int64_t OC = w.size(0), IC = w.size(1);
  const int64_t N = call.rows(x, "x", {"IC", IC, "w"});
  call.rows_like(y, "y", x, "x", {"OC", OC, "w"});
  if (b.defined()) call.shape(b, "b", {{"OC", OC, "w"}});
  const int n = call.to_int(N, "N (rows)"), ic = call.to_int(IC, "IC"), oc = call.to_int(OC, "OC");
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::linear_forward<T>(y.data<T>(), x.data<T>(), w.data<T>(), data_or_null<T>(b), n, ic, oc);
  });
}

// The three backward entry points share these shape checks, so that the halves and the whole
// accept exactly the same tensors. An undefined dx, dw, x or w is a part not asked for.
namespace {
struct LinearBackward {
  int n, ic, oc;
};

LinearBackward check_linear_backward(const OpCall& call, const Tensor& dx, const Tensor& dw, const Tensor& db,
                                     const Tensor& dy, const Tensor& x, const Tensor& w) {
  // [OC, IC] comes from the weight, or from its gradient when the weight is not an argument.
  const Tensor& weight = w.defined() ? w : dw;
  const char* weight_name = w.defined() ? "w" : "dw";
  call.rank(weight, weight_name, 2, "[OC, IC]");
  const int64_t OC = weight.size(0), IC = weight.size(1);
  if (w.defined() && dw.defined()) call.shape(dw, "dw", {{"OC", OC, "w"}, {"IC", IC, "w"}});
  const int64_t N = call.rows(dy, "dy", {"OC", OC, weight_name});
  if (dx.defined()) call.rows_like(dx, "dx", dy, "dy", {"IC", IC, weight_name});
  if (x.defined()) call.rows_like(x, "x", dy, "dy", {"IC", IC, weight_name});
  if (db.defined()) call.shape(db, "db", {{"OC", OC, weight_name}});
  return {call.to_int(N, "N (rows)"), call.to_int(IC, "IC"), call.to_int(OC, "OC")};
}

// One kernel call for every combination: the kernel skips the parts whose outputs are null, and
// the parts it runs do not depend on each other, so the halves give the bits of the whole.
void run_linear_backward(const OpCall& call, const LinearBackward& s, const Tensor& dx, const Tensor& dw,
                         const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w) {
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::linear_backward<T>(data_or_null<T>(dx), data_or_null<compute_t<T>>(dw), data_or_null<compute_t<T>>(db),
                                dy.data<T>(),
                                data_or_null<T>(x), data_or_null<T>(w), s.n, s.ic, s.oc);
  });
}
}  // namespace

void linear_backward_input(const Tensor& dx, const Tensor& dy, const Tensor& w) {
  OpCall call("ops::linear_backward_input", ProfileCategory::Gemm);
  call.operands({{dx, "dx"}, {dy, "dy"}, {w, "w"}});
  const LinearBackward s = check_linear_backward(call, dx, Tensor(), Tensor(), dy, Tensor(), w);
  run_linear_backward(call, s, dx, Tensor(), Tensor(), dy, Tensor(), w);
}

void linear_backward_weight(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x) {
  OpCall call("ops::linear_backward_weight", ProfileCategory::Gemm);
  call.operands({{dy, "dy"}, {x, "x"}}).accumulators({{dw, "dw"}}).optional_accumulator(db, "db");
  const LinearBackward s = check_linear_backward(call, Tensor(), dw, db, dy, x, Tensor());
  run_linear_backward(call, s, Tensor(), dw, db, dy, x, Tensor());
}

void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                     const Tensor& w) {
  OpCall call("ops::linear_backward", ProfileCategory::Gemm);
  call.operands({{dy, "dy"}, {x, "x"}, {w, "w"}}).optional(dx, "dx").accumulators({{dw, "dw"}}).optional_accumulator(db, "db");
  const LinearBackward s = check_linear_backward(call, dx, dw, db, dy, x, w);
  run_linear_backward(call, s, dx, dw, db, dy, x, w);
}

}  // namespace tessera::ops
