#include "ops/elementwise.h"

#include <cstddef>

#include "kernels/cpu/dropout.h"
#include "kernels/cpu/residual.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

namespace {
void check_probability(const OpCall& call, float p) {
  TS_CHECK(p >= 0.0f && p <= 1.0f, "{}: dropout probability {} must be in [0, 1]", call.op(), p);
}
}  // namespace

void add_inplace(const Tensor& y, const Tensor& x) {
  OpCall call("ops::add_inplace");
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(x, "x", y, "y");
  const auto n = static_cast<size_t>(y.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::add_inplace<T>(y.data<T>(), x.data<T>(), n); });
}

void add_bias(const Tensor& y, const Tensor& b) {
  OpCall call("ops::add_bias");
  call.operands({{y, "y"}, {b, "b"}});
  const int64_t C = call.last_dim(y, "y", "C");
  call.rank(b, "b", 1, "[C]");
  TS_CHECK(b.size(0) == C, "{}: b has shape {}, expected [C={}] (C from y)", call.op(), b.shape_string(), C);
  const auto rows = static_cast<size_t>(C == 0 ? 0 : y.numel() / C);
  call.dispatch([&]<class T>(Cpu<T>) { kernels::add_bias<T>(y.data<T>(), b.data<T>(), rows, static_cast<size_t>(C)); });
}

void add_bias_backward(const Tensor& db, const Tensor& dy) {
  OpCall call("ops::add_bias_backward");
  call.operands({{db, "db"}, {dy, "dy"}});
  const int64_t C = call.last_dim(dy, "dy", "C");
  call.rank(db, "db", 1, "[C]");
  TS_CHECK(db.size(0) == C, "{}: db has shape {}, expected [C={}] (C from dy)", call.op(), db.shape_string(), C);
  const auto rows = static_cast<size_t>(C == 0 ? 0 : dy.numel() / C);
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::add_bias_backward<T>(db.data<T>(), dy.data<T>(), rows, static_cast<size_t>(C));
  });
}

void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  OpCall call("ops::dropout_forward");
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(y, "y", x, "x");
  check_probability(call, p);
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch(
      [&]<class T>(Cpu<T>) { kernels::dropout_forward<T>(y.data<T>(), x.data<T>(), n, p, seed, stream, offset); });
}

void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  OpCall call("ops::dropout_backward");
  call.operands({{dx, "dx"}, {dy, "dy"}});
  call.same_shape(dx, "dx", dy, "dy");
  check_probability(call, p);
  const auto n = static_cast<size_t>(dy.numel());
  call.dispatch(
      [&]<class T>(Cpu<T>) { kernels::dropout_backward<T>(dx.data<T>(), dy.data<T>(), n, p, seed, stream, offset); });
}

}  // namespace tessera::ops
