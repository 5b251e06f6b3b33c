#pragma once
// The dispatch seam of the ops layer. An op checks its tensors (shapes, dtypes, contiguity, one
// device), then hands dispatch() the (device, dtype) of its operands and a generic lambda that
// calls one backend's kernels. dispatch() is the single place that knows which (device, dtype)
// pairs have kernels: today only (CPU, f32), which calls the lambda with Cpu<float>; every other
// pair fails with "<op>: no kernel for <dtype> tensors on <device>".
//
// The tag names the backend as well as the element type, so an op's lambda reads
// `[&]<class T>(Cpu<T>) { kernels::op<T>(...); }`: bf16 CPU kernels add a branch here calling
// f(Cpu<bf16>{}); a CUDA backend adds a tag (Cuda<T>), a branch here, and next to each op's CPU
// lambda a CUDA one (an overload set of the two). Modules in nn call ops and never change.
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tessera::ops {

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
  if (device == Device::CPU && dtype == DType::F32) return std::forward<F>(f)(Cpu<float>{});
  fail_no_kernel(op, device, dtype);
}

}  // namespace tessera::ops
