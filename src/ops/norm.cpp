#include "ops/norm.h"

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::data_or_null;
using detail::OpCall;

namespace {
struct Rows {
  int n, c;
};

// x [N.., C] against w [C]; the rows' statistics and any tensor shaped like x against x.
Rows check_norm(const OpCall& call, const Tensor& x, const Tensor& w, std::initializer_list<detail::Arg> like_x,
                std::initializer_list<detail::Arg> per_row) {
  call.rank(w, "w", 1, "[C]");
  const int64_t C = w.size(0);
  const int64_t N = call.rows(x, "x", {"C", C, "w"});
  for (const detail::Arg& a : like_x) {
    if (a.tensor.defined()) call.same_shape(a.tensor, a.name, x, "x");
  }
  for (const detail::Arg& a : per_row) call.per_row(a.tensor, a.name, x, "x");
  return {call.to_int(N, "N (rows)"), call.to_int(C, "C")};
}
}  // namespace

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                       const Tensor& b, float eps) {
  OpCall call("ops::layernorm_forward", ProfileCategory::Norm);
  call.operands({{y, "y"}, {x, "x"}, {w, "w"}}).optional(b, "b").accumulators({{mean, "mean"}, {rstd, "rstd"}});
  const Rows s = check_norm(call, x, w, {{y, "y"}}, {{mean, "mean"}, {rstd, "rstd"}});
  if (b.defined()) call.shape(b, "b", {{"C", s.c, "w"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::layernorm_forward<T>(y.data<T>(), mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), x.data<T>(),
                                  w.data<T>(), data_or_null<T>(b), s.n, s.c, static_cast<compute_t<T>>(eps));
  });
}

void layernorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  OpCall call("ops::layernorm_backward", ProfileCategory::Norm);
  call.operands({{dy, "dy"}, {x, "x"}, {w, "w"}})
      .optional(dx, "dx")
      .accumulators({{dw, "dw"}, {mean, "mean"}, {rstd, "rstd"}})
      .optional_accumulator(db, "db");
  const Rows s = check_norm(call, x, w, {{dx, "dx"}, {dy, "dy"}}, {{mean, "mean"}, {rstd, "rstd"}});
  call.shape(dw, "dw", {{"C", s.c, "w"}});
  if (db.defined()) call.shape(db, "db", {{"C", s.c, "w"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::layernorm_backward<T>(data_or_null<T>(dx), dw.data<compute_t<T>>(), data_or_null<compute_t<T>>(db),
                                   dy.data<T>(), x.data<T>(), w.data<T>(), mean.data<compute_t<T>>(),
                                   rstd.data<compute_t<T>>(), s.n, s.c);
  });
}

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  OpCall call("ops::rmsnorm_forward", ProfileCategory::Norm);
  call.operands({{y, "y"}, {x, "x"}, {w, "w"}}).accumulators({{rstd, "rstd"}});
  const Rows s = check_norm(call, x, w, {{y, "y"}}, {{rstd, "rstd"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::rmsnorm_forward<T>(y.data<T>(), rstd.data<compute_t<T>>(), x.data<T>(), w.data<T>(), s.n, s.c,
                                static_cast<compute_t<T>>(eps));
  });
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd) {
  OpCall call("ops::rmsnorm_backward", ProfileCategory::Norm);
  call.operands({{dy, "dy"}, {x, "x"}, {w, "w"}}).optional(dx, "dx").accumulators({{dw, "dw"}, {rstd, "rstd"}});
  const Rows s = check_norm(call, x, w, {{dx, "dx"}, {dy, "dy"}}, {{rstd, "rstd"}});
  call.shape(dw, "dw", {{"C", s.c, "w"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::rmsnorm_backward<T>(data_or_null<T>(dx), dw.data<compute_t<T>>(), dy.data<T>(), x.data<T>(), w.data<T>(),
                                 rstd.data<compute_t<T>>(), s.n, s.c);
  });
}

}  // namespace tessera::ops
