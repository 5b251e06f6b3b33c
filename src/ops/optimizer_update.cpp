#include "ops/optimizer_update.h"

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/lamb.h"
#include "kernels/cpu/lars.h"
#include "kernels/cpu/one_bit_adam.h"
#include "kernels/cpu/sgd.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

namespace {
// The run's length after checking that `value` is [N] and every other tensor has its shape.
size_t run_length(const OpCall& call, const Tensor& value, std::initializer_list<detail::Arg> others) {
  call.rank(value, "value", 1, "[N]");
  for (const detail::Arg& a : others) {
    if (a.tensor.defined()) call.same_shape(a.tensor, a.name, value, "value");
  }
  return static_cast<size_t>(value.numel());
}
}  // namespace

void adamw_update(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWStep& k) {
  OpCall call("ops::adamw_update", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}, {m, "m"}, {v, "v"}});
  const size_t n = run_length(call, value, {{grad, "grad"}, {m, "m"}, {v, "v"}});
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::adamw_update<T>(value.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), n, k.lr, k.beta1, k.beta2,
                             k.eps, k.weight_decay, k.step, k.variance_frozen_at);
  });
}

void sgd_update(const Tensor& value, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& k) {
  OpCall call("ops::sgd_update", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}}).optional_master(momentum_buffer, "momentum_buffer");
  const size_t n = run_length(call, value, {{grad, "grad"}, {momentum_buffer, "momentum_buffer"}});
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::sgd_update(value.data<T>(), grad.data<T>(), detail::data_or_null<T>(momentum_buffer), n, k.lr, k.momentum,
                        k.weight_decay, k.decoupled_weight_decay, k.nesterov);
  });
}

SquareSums lamb_moments(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v, const LambStep& k,
                        bool adapted) {
  OpCall call("ops::lamb_moments", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}, {m, "m"}, {v, "v"}});
  const size_t n = run_length(call, value, {{grad, "grad"}, {m, "m"}, {v, "v"}});
  return call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::LambSquares s = kernels::lamb_moments(value.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), n,
                                                         k.beta1, k.beta2, k.eps, k.weight_decay, k.step, adapted);
    return SquareSums{s.weights, s.directions};
  });
}

void lamb_apply(const Tensor& value, const Tensor& m, const Tensor& v, const LambStep& k, float step_size) {
  OpCall call("ops::lamb_apply", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {m, "m"}, {v, "v"}});
  const size_t n = run_length(call, value, {{m, "m"}, {v, "v"}});
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::lamb_apply(value.data<T>(), m.data<T>(), v.data<T>(), n, k.beta1, k.beta2, k.eps, k.weight_decay, k.step,
                        step_size);
  });
}

SquareSums lars_squares(const Tensor& value, const Tensor& grad) {
  OpCall call("ops::lars_squares", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}});
  const size_t n = run_length(call, value, {{grad, "grad"}});
  return call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::LarsSquares s = kernels::lars_squares(value.data<T>(), grad.data<T>(), n);
    return SquareSums{s.weights, s.grads};
  });
}

void lars_update(const Tensor& value, const Tensor& grad, const Tensor& momentum_buffer, float scale,
                 float weight_decay, float mu) {
  OpCall call("ops::lars_update", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}}).optional_master(momentum_buffer, "momentum_buffer");
  const size_t n = run_length(call, value, {{grad, "grad"}, {momentum_buffer, "momentum_buffer"}});
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::lars_update(value.data<T>(), grad.data<T>(), detail::data_or_null<T>(momentum_buffer), n, scale,
                         weight_decay, mu);
  });
}

BlockMaxima adam8bit_block(const Tensor& value, const Tensor& grad, const Tensor& m_codes, const Tensor& v_codes,
                           float m_scale, float v_scale, const Tensor& signed_code, const Tensor& unsigned_code,
                           const Tensor& new_m, const Tensor& new_v, const AdamWStep& k) {
  OpCall call("ops::adam8bit_block", ProfileCategory::Optimizer);
  call.master({{value, "value"},
               {grad, "grad"},
               {new_m, "new_m"},
               {new_v, "new_v"},
               {signed_code, "signed_code"},
               {unsigned_code, "unsigned_code"}});
  call.bytes(m_codes, "m_codes").bytes(v_codes, "v_codes");
  const size_t n = run_length(
      call, value, {{grad, "grad"}, {m_codes, "m_codes"}, {v_codes, "v_codes"}, {new_m, "new_m"}, {new_v, "new_v"}});
  call.rank(signed_code, "signed_code", 1, "[K]");
  call.rank(unsigned_code, "unsigned_code", 1, "[K]");
  return call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::BlockMaxima b =
        kernels::adam8bit_block(value.data<T>(), grad.data<T>(), m_codes.data<uint8_t>(), v_codes.data<uint8_t>(),
                                m_scale, v_scale, signed_code.data<T>(), unsigned_code.data<T>(), new_m.data<T>(),
                                new_v.data<T>(), n, k.lr, k.beta1, k.beta2, k.eps, k.weight_decay, k.step);
    return BlockMaxima{b.m, b.v};
  });
}

void quantize_to_codes(const Tensor& codes, const Tensor& values, const Tensor& code, float absmax) {
  OpCall call("ops::quantize_to_codes", ProfileCategory::Optimizer);
  call.master({{values, "values"}, {code, "code"}}).bytes(codes, "codes");
  call.rank(values, "values", 1, "[N]");
  call.same_shape(codes, "codes", values, "values");
  call.rank(code, "code", 1, "[K]");
  TS_CHECK(code.numel() >= 1 && code.numel() <= 256, "{}: code has {} entries; an 8-bit code indexes 1 to 256",
           call.op(), code.numel());
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::quantize_to_codes(codes.data<uint8_t>(), values.data<T>(), static_cast<size_t>(values.numel()),
                               code.data<T>(), static_cast<size_t>(code.numel()), absmax);
  });
}

void one_bit_adam_momentum(const Tensor& m, const Tensor& grad, float beta1, float ranks) {
  OpCall call("ops::one_bit_adam_momentum", ProfileCategory::Optimizer);
  call.master({{m, "m"}, {grad, "grad"}});
  call.rank(m, "m", 1, "[N]");
  call.same_shape(grad, "grad", m, "m");
  const auto n = static_cast<size_t>(m.numel());
  call.dispatch_f32(
      [&]<class T>(Cpu<T>) { kernels::one_bit_adam_momentum(m.data<T>(), grad.data<T>(), n, beta1, ranks); });
}

void one_bit_adam_apply(const Tensor& value, const Tensor& m, const Tensor& v, const FrozenAdamStep& k) {
  OpCall call("ops::one_bit_adam_apply", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {m, "m"}, {v, "v"}});
  const size_t n = run_length(call, value, {{m, "m"}, {v, "v"}});
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::one_bit_adam_apply(value.data<T>(), m.data<T>(), v.data<T>(), n, k.step_size, k.bias2_sqrt, k.eps,
                                k.decay);
  });
}

namespace {
// Checks a message's bits and scales against the N elements it carries.
void check_message(const OpCall& call, const Tensor& bits, const Tensor& scales, int64_t N, const char* from) {
  const auto n = static_cast<size_t>(N);
  call.shape(bits, "bits", {{"bytes", static_cast<int64_t>(sign_bits_bytes(n)), from}});
  call.shape(scales, "scales", {{"blocks", static_cast<int64_t>(sign_blocks(n)), from}});
}
}  // namespace

void sign_compress(const Tensor& acc, const Tensor& bits, const Tensor& scales) {
  OpCall call("ops::sign_compress", ProfileCategory::Optimizer);
  call.master({{acc, "acc"}, {scales, "scales"}}).bytes(bits, "bits");
  call.rank(acc, "acc", 1, "[N]");
  check_message(call, bits, scales, acc.numel(), "acc");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::sign_compress(std::span<T>(acc.data<T>(), static_cast<size_t>(acc.numel())), bits.data<uint8_t>(),
                           scales.data<T>());
  });
}

void add_sign_decompressed(const Tensor& out, const Tensor& bits, const Tensor& scales, float weight) {
  OpCall call("ops::add_sign_decompressed", ProfileCategory::Optimizer);
  call.master({{out, "out"}, {scales, "scales"}}).bytes(bits, "bits");
  call.rank(out, "out", 1, "[N]");
  check_message(call, bits, scales, out.numel(), "out");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::add_sign_decompressed(std::span<T>(out.data<T>(), static_cast<size_t>(out.numel())), bits.data<uint8_t>(),
                                   scales.data<T>(), weight);
  });
}

}  // namespace tessera::ops
