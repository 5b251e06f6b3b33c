#include "ops/dispatch.h"

#include "core/check.h"

namespace tessera::ops {

std::string_view device_name(Device device) {
  switch (device) {
    case Device::CPU:
      return "cpu";
    case Device::CUDA:
      return "cuda";
  }
  return "?";
}

void fail_no_kernel(std::string_view op, Device device, DType dtype) {
  TS_FAIL("{}: no kernel for {} tensors on {}", op, dtype_name(dtype), device_name(device));
}

}  // namespace tessera::ops
