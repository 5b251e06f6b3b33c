#pragma once
// precision.* and parallel.grad_dtype: the dtypes of a run. precision.compute chooses the dtype of
// the GEMM inputs, the saved activations and their gradients ("fp32", "bf16", "fp16"); master
// weights, optimizer state, gradient accumulation, softmax, norm statistics and the loss stay f32.
// fp16's narrow range needs loss scaling (precision.loss_scale: "dynamic", or a fixed number);
// bf16 has f32's range and needs none. parallel.grad_dtype sends the data-parallel gradient
// reduction in a 16-bit dtype, summed in f32. Names live with the config so that what reads
// configs need not link the runtime.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace tessera::config {

// "fp32", "bf16", "fp16" for F32, BF16, F16.
std::string_view precision_name(DType dtype);
// Refuses an unknown name for `key`, listing the known ones.
DType parse_precision(std::string_view name, std::string_view key);

// Dynamic loss scaling as PyTorch's GradScaler does it: the loss is multiplied by the scale before
// the backward and the gradients divided by it before the step; a step whose gradients are not
// finite on any rank is skipped by every rank and the scale multiplied by backoff_factor; after
// growth_interval finite steps in a row it is multiplied by growth_factor.
// precision.f32_gemm: which library runs the float products: "auto" (the fastest of the two, in
// narrow or wide blocks, on the model's products, measured; train/float_gemm_choice.h), "onednn" or
// "openblas" (in narrow blocks).
enum class FloatGemmSetting : uint8_t { Auto, OneDnn, OpenBlas };
std::string_view float_gemm_setting_name(FloatGemmSetting setting);
std::optional<FloatGemmSetting> find_float_gemm_setting(std::string_view name);

struct LossScaling {
  bool enabled = false;  // precision.compute = "fp16"
  bool dynamic = true;   // precision.loss_scale = "dynamic"; false: a fixed scale
  double init_scale = 65536.0;  // the dynamic scale's start, or the fixed scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct PrecisionOptions {
  DType compute = DType::F32;
  DType grad_dtype = DType::F32;  // of the data-parallel gradient reduction's messages
  LossScaling loss_scaling;

  bool mixed() const { return compute != DType::F32; }
  // "bf16 compute (f32 master weights)", "fp16 compute, dynamic loss scale from 65536", "fp32".
  std::string describe() const;
};

}  // namespace tessera::config
