#include "config/precision.h"

#include <fmt/format.h>

#include <utility>

#include "core/check.h"

namespace tessera::config {

namespace {
constexpr std::pair<DType, std::string_view> kNames[] = {
    {DType::F32, "fp32"}, {DType::BF16, "bf16"}, {DType::F16, "fp16"}};
}  // namespace

std::string_view precision_name(DType dtype) {
  for (const auto& [d, name] : kNames) {
    if (d == dtype) return name;
  }
  TS_FAIL("dtype {} is not a precision of a run (fp32, bf16, fp16)", dtype_name(dtype));
}

DType parse_precision(std::string_view name, std::string_view key) {
  for (const auto& [d, known] : kNames) {
    if (known == name) return d;
  }
  TS_FAIL("config: {} = '{}' is not known; use \"fp32\", \"bf16\" or \"fp16\"", key, name);
}

std::string PrecisionOptions::describe() const {
  std::string text = mixed() ? fmt::format("{} compute, f32 master weights", precision_name(compute)) : "fp32";
  if (loss_scaling.enabled) {
    text += loss_scaling.dynamic ? fmt::format(", dynamic loss scale from {:g}", loss_scaling.init_scale)
                                 : fmt::format(", loss scale {:g}", loss_scaling.init_scale);
  }
  if (grad_dtype != DType::F32) text += fmt::format(", {} gradient messages", precision_name(grad_dtype));
  return text;
}

std::string_view float_gemm_setting_name(FloatGemmSetting setting) {
  switch (setting) {
    case FloatGemmSetting::OneDnn: return "onednn";
    case FloatGemmSetting::OpenBlas: return "openblas";
    case FloatGemmSetting::Auto: break;
  }
  return "auto";
}

std::optional<FloatGemmSetting> find_float_gemm_setting(std::string_view name) {
  for (FloatGemmSetting s : {FloatGemmSetting::Auto, FloatGemmSetting::OneDnn, FloatGemmSetting::OpenBlas}) {
    if (float_gemm_setting_name(s) == name) return s;
  }
  return std::nullopt;
}

}  // namespace tessera::config
