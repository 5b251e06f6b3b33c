#include "ops/elementwise.h"

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/copy.h"
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
  OpCall call("ops::add_inplace", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(x, "x", y, "y");
  const auto n = static_cast<size_t>(y.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::add_inplace<T>(y.data<T>(), x.data<T>(), n); });
}

void scale(const Tensor& y, const Tensor& x, float s) {
  OpCall call("ops::scale", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(x, "x", y, "y");
  const auto n = static_cast<size_t>(y.numel());
  call.dispatch([&]<class T>(Cpu<T>) {
    if (y.data<T>() != x.data<T>()) std::copy_n(x.data<T>(), n, y.data<T>());
    kernels::scale_inplace<T>(y.data<T>(), static_cast<compute_t<T>>(s), n);
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  OpCall call("ops::copy", ProfileCategory::Elementwise);
  call.operands({{dst, "dst"}, {src, "src"}});
  call.same_shape(src, "src", dst, "dst");
  const auto n = static_cast<size_t>(dst.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::copy<T>(dst.data<T>(), src.data<T>(), n); });
}

namespace {
// The rows of `rows` [..., C] after checking that `bias` is [C]; C in *C.
size_t bias_rows(const OpCall& call, const Tensor& rows, const char* rows_name, const Tensor& bias, const char* bias_name,
                 int64_t* C) {
  *C = call.last_dim(rows, rows_name, "C");
  call.rank(bias, bias_name, 1, "[C]");
  TS_CHECK(bias.size(0) == *C, "{}: {} has shape {}, expected [C={}] (C from {})", call.op(), bias_name,
           bias.shape_string(), *C, rows_name);
  return static_cast<size_t>(*C == 0 ? 0 : rows.numel() / *C);
}
}  // namespace

void add_bias(const Tensor& y, const Tensor& b) {
  OpCall call("ops::add_bias", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {b, "b"}});
  int64_t C = 0;
  const size_t rows = bias_rows(call, y, "y", b, "b", &C);
  call.dispatch([&]<class T>(Cpu<T>) { kernels::add_bias<T>(y.data<T>(), b.data<T>(), rows, static_cast<size_t>(C)); });
}

void add_bias_backward(const Tensor& db, const Tensor& dy) {
  OpCall call("ops::add_bias_backward", ProfileCategory::Elementwise);
  call.operands({{dy, "dy"}}).accumulators({{db, "db"}});
  int64_t C = 0;
  const size_t rows = bias_rows(call, dy, "dy", db, "db", &C);
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::add_bias_backward<T>(db.data<compute_t<T>>(), dy.data<T>(), rows, static_cast<size_t>(C));
  });
}

void widen(const Tensor& out, const Tensor& x) {
  OpCall call("ops::widen", ProfileCategory::Cast);
  call.operands({{x, "x"}}).accumulators({{out, "out"}});
  call.same_shape(out, "out", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::widen<T>(out.data<compute_t<T>>(), x.data<T>(), n); });
}

void narrow(const Tensor& out, const Tensor& x) {
  OpCall call("ops::narrow", ProfileCategory::Cast);
  call.operands({{out, "out"}}).accumulators({{x, "x"}});
  call.same_shape(out, "out", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::narrow<T>(out.data<T>(), x.data<compute_t<T>>(), n); });
}

void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  OpCall call("ops::dropout_forward", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(y, "y", x, "x");
  check_probability(call, p);
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch(
      [&]<class T>(Cpu<T>) { kernels::dropout_forward<T>(y.data<T>(), x.data<T>(), n, p, seed, stream, offset); });
}

void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  OpCall call("ops::dropout_backward", ProfileCategory::Elementwise);
  call.operands({{dx, "dx"}, {dy, "dy"}});
  call.same_shape(dx, "dx", dy, "dy");
  check_probability(call, p);
  const auto n = static_cast<size_t>(dy.numel());
  call.dispatch(
      [&]<class T>(Cpu<T>) { kernels::dropout_backward<T>(dx.data<T>(), dy.data<T>(), n, p, seed, stream, offset); });
}

}  // namespace tessera::ops
