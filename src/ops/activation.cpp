#include "ops/activation.h"

#include <cstddef>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/swiglu.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

void gelu_forward(const Tensor& y, const Tensor& x) {
  OpCall call("ops::gelu_forward", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(y, "y", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::gelu_forward<T>(y.data<T>(), x.data<T>(), n); });
}

void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) {
  OpCall call("ops::gelu_backward", ProfileCategory::Elementwise);
  call.operands({{dx, "dx"}, {x, "x"}, {dy, "dy"}});
  call.same_shape(dx, "dx", x, "x");
  call.same_shape(dy, "dy", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::gelu_backward<T>(dx.data<T>(), x.data<T>(), dy.data<T>(), n); });
}

void relu_forward(const Tensor& y, const Tensor& x) {
  OpCall call("ops::relu_forward", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(y, "y", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::relu_forward<T>(y.data<T>(), x.data<T>(), n); });
}

void relu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) {
  OpCall call("ops::relu_backward", ProfileCategory::Elementwise);
  call.operands({{dx, "dx"}, {x, "x"}, {dy, "dy"}});
  call.same_shape(dx, "dx", x, "x");
  call.same_shape(dy, "dy", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::relu_backward<T>(dx.data<T>(), x.data<T>(), dy.data<T>(), n); });
}

void relu2_forward(const Tensor& y, const Tensor& x) {
  OpCall call("ops::relu2_forward", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {x, "x"}});
  call.same_shape(y, "y", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::relu2_forward<T>(y.data<T>(), x.data<T>(), n); });
}

void relu2_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) {
  OpCall call("ops::relu2_backward", ProfileCategory::Elementwise);
  call.operands({{dx, "dx"}, {x, "x"}, {dy, "dy"}});
  call.same_shape(dx, "dx", x, "x");
  call.same_shape(dy, "dy", x, "x");
  const auto n = static_cast<size_t>(x.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::relu2_backward<T>(dx.data<T>(), x.data<T>(), dy.data<T>(), n); });
}

void swiglu_forward(const Tensor& y, const Tensor& gate, const Tensor& up) {
  OpCall call("ops::swiglu_forward", ProfileCategory::Elementwise);
  call.operands({{y, "y"}, {gate, "gate"}, {up, "up"}});
  call.same_shape(up, "up", gate, "gate");
  call.same_shape(y, "y", gate, "gate");
  const auto n = static_cast<size_t>(gate.numel());
  call.dispatch([&]<class T>(Cpu<T>) { kernels::swiglu_forward<T>(y.data<T>(), gate.data<T>(), up.data<T>(), n); });
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up) {
  OpCall call("ops::swiglu_backward", ProfileCategory::Elementwise);
  call.operands({{dgate, "dgate"}, {dup, "dup"}, {dy, "dy"}, {gate, "gate"}, {up, "up"}});
  call.same_shape(up, "up", gate, "gate");
  call.same_shape(dy, "dy", gate, "gate");
  call.same_shape(dgate, "dgate", gate, "gate");
  call.same_shape(dup, "dup", gate, "gate");
  const auto n = static_cast<size_t>(gate.numel());
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::swiglu_backward<T>(dgate.data<T>(), dup.data<T>(), dy.data<T>(), gate.data<T>(), up.data<T>(), n);
  });
}

}  // namespace tessera::ops
