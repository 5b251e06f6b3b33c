#pragma once
// The checks every op runs before it dispatches (internal to src/ops). An OpCall carries the op's
// name into every message, so a refused call reads "ops::linear_forward: w has shape [3, 5],
// expected [OC=4, IC=5] (OC from y; IC from x)" and names the tensors involved. The checks
// allocate nothing and format nothing unless they fail: an op costs a few comparisons. An OpCall
// also times the op, from its construction to the op's return, into the step's profiler
// (core/profiler.h) under the op's category; with profiling off that is one null test. And it hands
// its tensor arguments and its kernel's run to the thread's op trace (core/op_trace.h) when one is
// installed; without one, that is one null test per argument.
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <utility>

#include "core/op_trace.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tessera::ops::detail {

// A tensor argument and its name in messages.
struct Arg {
  const Tensor& tensor;
  const char* name;
};

// One dimension of an expected shape: its letter (B, T, C, ...; null for a dimension copied from
// another tensor), its size, and what it was taken from (a tensor or argument name; may be null).
struct Dim {
  const char* letter;
  int64_t size;
  const char* from;
};

class OpCall {
 public:
  OpCall(const char* op, ProfileCategory category) : timer_(op, category), op_(op), trace_(current_op_trace()) {
    if (trace_ != nullptr) trace_->begin(op);
  }

  const char* op() const { return op_; }

  // Floating-point operands: defined, contiguous, and on one device with one dtype, which the
  // first operand of the call sets; dispatch() runs on that (device, dtype).
  OpCall& operands(std::initializer_list<Arg> args);
  // An optional operand: undefined means "none"; when defined, it is checked as an operand.
  OpCall& optional(const Tensor& t, const char* name);
  // Accumulators: parameter gradients and statistics (norm statistics, log-sum-exp, losses), f32
  // whatever the floating operands' dtype (kernels/cpu/element.h); defined, contiguous, on the
  // operands' device.
  OpCall& accumulators(std::initializer_list<Arg> args);
  // An optional accumulator: undefined means "none"; when defined, it is checked as one.
  OpCall& optional_accumulator(const Tensor& t, const char* name);
  // Integer operands (token ids, targets): defined, contiguous, i32, on the operands' device.
  OpCall& indices(const Tensor& t, const char* name);
  // Master values, their gradients and optimizer state (ops/optimizer_update.h): f32 operands,
  // whatever the model's compute dtype; defined, contiguous, on one device.
  OpCall& master(std::initializer_list<Arg> args);
  // An optional master tensor: undefined means "none"; when defined, it is checked as one.
  OpCall& optional_master(const Tensor& t, const char* name);
  // Bytes (8-bit codes of quantized optimizer state, packed sign bits): defined, contiguous, u8,
  // on the operands' device.
  OpCall& bytes(const Tensor& t, const char* name);

  // t has exactly `rank` dimensions; `letters` spells them in the message ("[OC, IC]").
  void rank(const Tensor& t, const char* name, int rank, const char* letters) const;
  // t's shape is exactly dims.
  void shape(const Tensor& t, const char* name, std::initializer_list<Dim> dims) const;
  // The size of t's last dimension (the letter names it in the message when t has none).
  int64_t last_dim(const Tensor& t, const char* name, const char* letter) const;
  // t is [N.., last]: at least one dimension, the last one as given. Returns N, the product of
  // the leading dimensions (1 for a 1-D t).
  int64_t rows(const Tensor& t, const char* name, Dim last) const;
  // t is ref's leading dimensions followed by last.
  void rows_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name, Dim last) const;
  // t has ref's shape.
  void same_shape(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) const;
  // One value per row of ref [N.., X]: t is ref's leading dimensions, or flat [N].
  void per_row(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) const;
  // A size as the int the kernels take.
  int to_int(int64_t size, const char* what) const;

  // Runs f on the backend for the operands' (device, dtype); see ops/dispatch.h.
  template <class F>
  decltype(auto) dispatch(F&& f) const {
    const KernelTrace traced(trace_);
    return ops::dispatch(op_, device_, dtype_, std::forward<F>(f));
  }
  // Runs f on the backend for the operands' device, in f32 alone (the master() ops).
  template <class F>
  decltype(auto) dispatch_f32(F&& f) const {
    return ops::dispatch_f32(op_, device_, dtype_, std::forward<F>(f));
  }

 private:
  void operand(const Tensor& t, const char* name);
  void accumulator(const Tensor& t, const char* name);
  void master_operand(const Tensor& t, const char* name);
  // Integer or byte operands (indices, packed codes): defined, of `dtype`, contiguous, on the
  // operands' device; `holds` says what they hold in the message ("i32 indices").
  void non_float_operand(const Tensor& t, const char* name, DType dtype, const char* holds);

  // The kernel's run in the op trace: begun here, ended when the kernel returns (not when it throws).
  class KernelTrace {
   public:
    explicit KernelTrace(OpTrace* trace) : trace_(trace), exceptions_(std::uncaught_exceptions()) {
      if (trace_ != nullptr) trace_->kernel_begin();
    }
    ~KernelTrace() noexcept(false) {
      if (trace_ != nullptr && std::uncaught_exceptions() == exceptions_) trace_->kernel_end();
    }
    KernelTrace(const KernelTrace&) = delete;
    KernelTrace& operator=(const KernelTrace&) = delete;

   private:
    OpTrace* trace_;
    int exceptions_;
  };

  ProfileScope timer_;
  const char* op_;
  OpTrace* trace_;  // the thread's op trace, null when none
  const char* first_ = nullptr;  // the operand that set dtype_ and device_
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// The pointer a kernel takes for an optional tensor: null when it is undefined.
template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace tessera::ops::detail
