#pragma once
// The dispatch seam of the ops layer. An op checks its tensors (shapes, dtypes, contiguity, one
// device), then hands dispatch() the (device, dtype) of its operands and a generic lambda that
// calls one backend's kernels. dispatch() is the single place that knows which (device, dtype)
// pairs have kernels: (CPU, f32), (CPU, bf16) and (CPU, f16), which call the lambda with
// Cpu<float>, Cpu<bf16> or Cpu<f16>; every other pair fails with "<op>: no kernel for <dtype>
// tensors on <device>". The 16-bit kernels store in 16 bits and compute in f32; their parameter
// gradients and statistics are f32 tensors (kernels/cpu/element.h), so a lambda passes those as
// `t.data<compute_t<T>>()`.
//
// The tag names the backend as well as the element type, so an op's lambda reads
// `[&]<class T>(Cpu<T>) { kernels::op<T>(...); }`: a CUDA backend adds a tag (Cuda<T>), a branch
// here (and in dispatch_f32), and next to each op's CPU lambda a CUDA one (an overload set of the
// two). Modules in nn and optimizers in optim call ops and never change (docs/execution.md,
// "Adding a device backend").
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/element.h"

namespace tessera::ops {

using kernels::compute_t;

// The CPU backend (src/kernels/cpu) with element type T.
template <class T>
struct Cpu {
  using type = T;
};

std::string_view device_name(Device device);

// Throws tessera::Error "<op>: no kernel for <dtype> tensors on <device>".
[[noreturn]] void fail_no_kernel(std::string_view op, Device device, DType dtype);

// Calls f with the tag of the backend that serves (device, dtype) and returns what f returns.
template <class F>
decltype(auto) dispatch(std::string_view op, Device device, DType dtype, F&& f) {
  if (device == Device::CPU) {
    if (dtype == DType::F32) return std::forward<F>(f)(Cpu<float>{});
    if (dtype == DType::BF16) return std::forward<F>(f)(Cpu<bf16>{});
    if (dtype == DType::F16) return std::forward<F>(f)(Cpu<f16>{});
  }
  fail_no_kernel(op, device, dtype);
}

// For the ops whose tensors are f32 whatever the compute dtype (optimizer updates of the master
// copy, ops/optimizer_update.h): calls f with the tag of the backend that serves (device, f32),
// so f is compiled for f32 alone; every other pair fails as dispatch() does.
template <class F>
decltype(auto) dispatch_f32(std::string_view op, Device device, DType dtype, F&& f) {
  if (device == Device::CPU && dtype == DType::F32) return std::forward<F>(f)(Cpu<float>{});
  fail_no_kernel(op, device, dtype);
}

}  // namespace tessera::ops
