#include "ops/optimizer_update.h"

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/adafactor.h"
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

namespace {
// A layout the kernels can index: factored, groups matrices of rows × cols; else rows and cols 0.
void check_layout(const OpCall& call, const AdafactorLayout& layout) {
  const bool factored = layout.rows > 0 && layout.cols > 0 && layout.matrices > 0 &&
                        layout.group_size == layout.rows * layout.cols && layout.groups == layout.matrices;
  const bool vector = layout.rows == 0 && layout.cols == 0 && layout.matrices == 0;
  TS_CHECK(layout.group_size > 0 && layout.groups > 0 && (factored || vector),
           "{}: layout ({} matrices of {} × {}, {} groups of {}) is neither factored (groups matrices of rows × "
           "cols) nor a vector's (no rows or columns)",
           call.op(), layout.matrices, layout.rows, layout.cols, layout.groups, layout.group_size);
}

// Every run lies within the N owned elements and the tensor's elements.
void check_runs(const OpCall& call, std::span<const ElementRun> runs, int64_t n, const AdafactorLayout& layout) {
  const int64_t elements = layout.groups * layout.group_size;
  for (size_t r = 0; r < runs.size(); ++r) {
    const ElementRun& run = runs[r];
    TS_CHECK(run.length >= 0 && run.local >= 0 && run.local + run.length <= n && run.global >= 0 &&
                 run.global + run.length <= elements,
             "{}: run {} (owned elements [{}, {}), tensor elements [{}, {})) lies outside the N={} owned elements "
             "or the tensor's {}",
             call.op(), r, run.local, run.local + run.length, run.global, run.global + run.length, n, elements);
  }
}

void check_table(const OpCall& call, size_t entries, const char* name, int64_t expected, const char* what) {
  TS_CHECK(static_cast<int64_t>(entries) == expected, "{}: {} has {} entries, expected {} ({})", call.op(), name,
           entries, expected, what);
}

// R [matrices·rows] and C [matrices·cols] of a factored layout.
void check_factors(const OpCall& call, const Tensor& row, const Tensor& col, const AdafactorLayout& layout) {
  TS_CHECK(layout.factored(), "{}: the layout is a vector's, which has no row and column statistics", call.op());
  call.shape(row, "row", {{"R", layout.matrices * layout.rows, "layout"}});
  call.shape(col, "col", {{"C", layout.matrices * layout.cols, "layout"}});
}
}  // namespace

void adafactor_sums(const Tensor& value, const Tensor& grad, std::span<const ElementRun> runs,
                    const AdafactorLayout& layout, double eps1, std::span<double> row_sums, std::span<double> col_sums,
                    std::span<double> weight_squares) {
  OpCall call("ops::adafactor_sums", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}});
  run_length(call, value, {{grad, "grad"}});
  check_layout(call, layout);
  check_runs(call, runs, value.numel(), layout);
  check_table(call, weight_squares.size(), "weight_squares", layout.groups, "one per group");
  check_table(call, row_sums.size(), "row_sums", layout.matrices * layout.rows, "matrices × rows");
  check_table(call, col_sums.size(), "col_sums", layout.matrices * layout.cols, "matrices × cols");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::adafactor_sums(value.data<T>(), grad.data<T>(), runs.data(), runs.size(), layout, eps1, row_sums.data(),
                            col_sums.data(), weight_squares.data());
  });
}

void adafactor_factored_moment(const Tensor& row, const Tensor& col, std::span<const double> row_sums,
                               std::span<const double> col_sums, const AdafactorLayout& layout, float old_weight,
                               float new_weight, std::span<double> row_totals) {
  OpCall call("ops::adafactor_factored_moment", ProfileCategory::Optimizer);
  call.master({{row, "row"}, {col, "col"}});
  check_layout(call, layout);
  check_factors(call, row, col, layout);
  check_table(call, row_sums.size(), "row_sums", row.numel(), "one per entry of row");
  check_table(call, col_sums.size(), "col_sums", col.numel(), "one per entry of col");
  check_table(call, row_totals.size(), "row_totals", layout.matrices, "one per matrix");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::adafactor_factored_moment(row.data<T>(), col.data<T>(), row_sums.data(), col_sums.data(), layout,
                                       old_weight, new_weight, row_totals.data());
  });
}

void adafactor_vector_moment(const Tensor& v, const Tensor& grad, float old_weight, float new_weight, float eps1) {
  OpCall call("ops::adafactor_vector_moment", ProfileCategory::Optimizer);
  call.master({{v, "v"}, {grad, "grad"}});
  call.rank(v, "v", 1, "[N]");
  call.same_shape(grad, "grad", v, "v");
  const auto n = static_cast<size_t>(v.numel());
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    kernels::adafactor_vector_moment(v.data<T>(), grad.data<T>(), n, old_weight, new_weight, eps1);
  });
}

void adafactor_factored_update_squares(const Tensor& grad, const Tensor& row, const Tensor& col,
                                       std::span<const double> row_totals, std::span<const ElementRun> runs,
                                       const AdafactorLayout& layout, std::span<double> update_squares) {
  OpCall call("ops::adafactor_factored_update_squares", ProfileCategory::Optimizer);
  call.master({{grad, "grad"}, {row, "row"}, {col, "col"}});
  call.rank(grad, "grad", 1, "[N]");
  check_layout(call, layout);
  check_factors(call, row, col, layout);
  check_runs(call, runs, grad.numel(), layout);
  check_table(call, row_totals.size(), "row_totals", layout.matrices, "one per matrix");
  check_table(call, update_squares.size(), "update_squares", layout.groups, "one per group");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::AdafactorMoment moment{row.data<T>(), col.data<T>(), row_totals.data(), nullptr};
    kernels::adafactor_update_squares(grad.data<T>(), moment, runs.data(), runs.size(), layout,
                                      update_squares.data());
  });
}

void adafactor_vector_update_squares(const Tensor& grad, const Tensor& v, std::span<const ElementRun> runs,
                                     const AdafactorLayout& layout, std::span<double> update_squares) {
  OpCall call("ops::adafactor_vector_update_squares", ProfileCategory::Optimizer);
  call.master({{grad, "grad"}, {v, "v"}});
  call.rank(grad, "grad", 1, "[N]");
  call.same_shape(v, "v", grad, "grad");
  check_layout(call, layout);
  TS_CHECK(!layout.factored(), "{}: the layout is factored; its second moment is row and col", call.op());
  check_runs(call, runs, grad.numel(), layout);
  check_table(call, update_squares.size(), "update_squares", layout.groups, "one per group");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::AdafactorMoment moment{nullptr, nullptr, nullptr, v.data<T>()};
    kernels::adafactor_update_squares(grad.data<T>(), moment, runs.data(), runs.size(), layout,
                                      update_squares.data());
  });
}

void adafactor_factored_apply(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& row,
                              const Tensor& col, std::span<const double> row_totals, std::span<const ElementRun> runs,
                              const AdafactorLayout& layout, std::span<const AdafactorGroupStep> groups, float beta1) {
  OpCall call("ops::adafactor_factored_apply", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}, {row, "row"}, {col, "col"}}).optional_master(m, "m");
  run_length(call, value, {{grad, "grad"}, {m, "m"}});
  check_layout(call, layout);
  check_factors(call, row, col, layout);
  check_runs(call, runs, value.numel(), layout);
  check_table(call, row_totals.size(), "row_totals", layout.matrices, "one per matrix");
  check_table(call, groups.size(), "groups", layout.groups, "one step per group");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::AdafactorMoment moment{row.data<T>(), col.data<T>(), row_totals.data(), nullptr};
    kernels::adafactor_apply(value.data<T>(), grad.data<T>(), detail::data_or_null<T>(m), moment, runs.data(),
                             runs.size(), layout, groups.data(), beta1);
  });
}

void adafactor_vector_apply(const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v,
                            std::span<const ElementRun> runs, const AdafactorLayout& layout,
                            std::span<const AdafactorGroupStep> groups, float beta1) {
  OpCall call("ops::adafactor_vector_apply", ProfileCategory::Optimizer);
  call.master({{value, "value"}, {grad, "grad"}, {v, "v"}}).optional_master(m, "m");
  run_length(call, value, {{grad, "grad"}, {v, "v"}, {m, "m"}});
  check_layout(call, layout);
  TS_CHECK(!layout.factored(), "{}: the layout is factored; its second moment is row and col", call.op());
  check_runs(call, runs, value.numel(), layout);
  check_table(call, groups.size(), "groups", layout.groups, "one step per group");
  call.dispatch_f32([&]<class T>(Cpu<T>) {
    const kernels::AdafactorMoment moment{nullptr, nullptr, nullptr, v.data<T>()};
    kernels::adafactor_apply(value.data<T>(), grad.data<T>(), detail::data_or_null<T>(m), moment, runs.data(),
                             runs.size(), layout, groups.data(), beta1);
  });
}

}  // namespace tessera::ops
