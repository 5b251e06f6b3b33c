#include "ops/op_call.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::ops::detail {

namespace {

// "[B=2, T=3, C=12] (B, T from tokens; C from wte)": the sizes with their letters, then where
// each letter came from, so a message names every tensor the expectation was built from.
std::string describe(const std::vector<Dim>& dims) {
  struct Source {
    std::string from;
    std::vector<std::string> labels;
  };
  std::string shape = "[";
  std::vector<Source> sources;  // in order of appearance
  for (size_t i = 0; i < dims.size(); ++i) {
    const Dim& d = dims[i];
    shape += i ? ", " : "";
    shape += d.letter ? fmt::format("{}={}", d.letter, d.size) : std::to_string(d.size);
    if (d.from == nullptr) continue;
    const std::string label = d.letter ? d.letter : "leading dims";
    auto it = std::find_if(sources.begin(), sources.end(), [&](const Source& s) { return s.from == d.from; });
    if (it == sources.end()) {
      sources.push_back({d.from, {label}});
    } else if (std::find(it->labels.begin(), it->labels.end(), label) == it->labels.end()) {
      it->labels.push_back(label);
    }
  }
  shape += "]";
  for (size_t i = 0; i < sources.size(); ++i) {
    shape += i ? "; " : " (";
    shape += fmt::format("{} from {}", fmt::join(sources[i].labels, ", "), sources[i].from);
  }
  if (!sources.empty()) shape += ")";
  return shape;
}

bool leading_dims_equal(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int d = 0; d + 1 < a.dim(); ++d) {
    if (a.shape()[d] != b.shape()[d]) return false;
  }
  return true;
}

std::string leading_shape(const Tensor& t) {
  Shape s = t.shape();
  if (!s.empty()) s.pop_back();
  return shape_to_string(s);
}

}  // namespace

void OpCall::operand(const Tensor& t, const char* name) {
  if (trace_ != nullptr) trace_->argument(t);
  TS_CHECK(t.defined(), "{}: {} is undefined, and the op needs it", op_, name);
  TS_CHECK(t.is_contiguous(),
           "{}: {} must be contiguous, got a strided view of shape {} (strides {}); call contiguous()", op_, name,
           t.shape_string(), shape_to_string(t.strides()));
  if (first_ == nullptr) {
    first_ = name;
    dtype_ = t.dtype();
    device_ = t.device();
    return;
  }
  TS_CHECK(t.dtype() == dtype_, "{}: {} has dtype {} but {} has {}; the floating operands of one call share a dtype",
           op_, name, dtype_name(t.dtype()), first_, dtype_name(dtype_));
  TS_CHECK(t.device() == device_, "{}: {} is on {} but {} is on {}; the operands of one call share a device", op_, name,
           device_name(t.device()), first_, device_name(device_));
}

OpCall& OpCall::operands(std::initializer_list<Arg> args) {
  for (const Arg& a : args) operand(a.tensor, a.name);
  return *this;
}

OpCall& OpCall::optional(const Tensor& t, const char* name) {
  if (t.defined()) operand(t, name);
  return *this;
}

OpCall& OpCall::accumulators(std::initializer_list<Arg> args) {
  for (const Arg& a : args) accumulator(a.tensor, a.name);
  return *this;
}

OpCall& OpCall::optional_accumulator(const Tensor& t, const char* name) {
  if (t.defined()) accumulator(t, name);
  return *this;
}

void OpCall::accumulator(const Tensor& t, const char* name) {
  if (trace_ != nullptr) trace_->argument(t);
  TS_CHECK(t.defined(), "{}: {} is undefined, and the op needs it", op_, name);
  TS_CHECK(t.is_contiguous(),
           "{}: {} must be contiguous, got a strided view of shape {} (strides {}); call contiguous()", op_, name,
           t.shape_string(), shape_to_string(t.strides()));
  TS_CHECK(t.dtype() == DType::F32,
           "{}: {} has dtype {}; parameter gradients and statistics are f32 whatever the operands' dtype", op_, name,
           dtype_name(t.dtype()));
  TS_CHECK(first_ == nullptr || t.device() == device_,
           "{}: {} is on {} but {} is on {}; the operands of one call share a device", op_, name,
           device_name(t.device()), first_, device_name(device_));
}

OpCall& OpCall::indices(const Tensor& t, const char* name) {
  if (trace_ != nullptr) trace_->argument(t);
  non_float_operand(t, name, DType::I32, "i32 indices");
  return *this;
}

OpCall& OpCall::master(std::initializer_list<Arg> args) {
  for (const Arg& a : args) master_operand(a.tensor, a.name);
  return *this;
}

OpCall& OpCall::optional_master(const Tensor& t, const char* name) {
  if (t.defined()) master_operand(t, name);
  return *this;
}

OpCall& OpCall::bytes(const Tensor& t, const char* name) {
  non_float_operand(t, name, DType::U8, "u8 bytes");
  return *this;
}

void OpCall::non_float_operand(const Tensor& t, const char* name, DType dtype, const char* holds) {
  TS_CHECK(t.defined(), "{}: {} is undefined, and the op needs it", op_, name);
  TS_CHECK(t.dtype() == dtype, "{}: {} must hold {}, got dtype {}", op_, name, holds, dtype_name(t.dtype()));
  TS_CHECK(t.is_contiguous(),
           "{}: {} must be contiguous, got a strided view of shape {} (strides {}); call contiguous()", op_, name,
           t.shape_string(), shape_to_string(t.strides()));
  TS_CHECK(first_ == nullptr || t.device() == device_,
           "{}: {} is on {} but {} is on {}; the operands of one call share a device", op_, name,
           device_name(t.device()), first_, device_name(device_));
}

void OpCall::master_operand(const Tensor& t, const char* name) {
  TS_CHECK(t.defined(), "{}: {} is undefined, and the op needs it", op_, name);
  TS_CHECK(t.dtype() == DType::F32,
           "{}: {} has dtype {}; master values, their gradients and optimizer state are f32 whatever the compute "
           "dtype",
           op_, name, dtype_name(t.dtype()));
  operand(t, name);
}

void OpCall::rank(const Tensor& t, const char* name, int r, const char* letters) const {
  TS_CHECK(t.dim() == r, "{}: {} has shape {}, expected {}-D {}", op_, name, t.shape_string(), r, letters);
}

void OpCall::shape(const Tensor& t, const char* name, std::initializer_list<Dim> dims) const {
  bool ok = t.dim() == static_cast<int>(dims.size());
  int d = 0;
  for (auto it = dims.begin(); ok && it != dims.end(); ++it, ++d) ok = t.shape()[d] == it->size;
  TS_CHECK(ok, "{}: {} has shape {}, expected {}", op_, name, t.shape_string(), describe(dims));
}

int64_t OpCall::last_dim(const Tensor& t, const char* name, const char* letter) const {
  TS_CHECK(t.dim() >= 1, "{}: {} is a scalar, expected [N.., {}]", op_, name, letter);
  return t.shape().back();
}

int64_t OpCall::rows(const Tensor& t, const char* name, Dim last) const {
  TS_CHECK(t.dim() >= 1 && t.shape().back() == last.size, "{}: {} has shape {}, expected [N.., {}", op_, name,
           t.shape_string(), describe({last}).substr(1));
  int64_t n = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) n *= t.shape()[d];
  return n;
}

void OpCall::rows_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name, Dim last) const {
  if (leading_dims_equal(t, ref) && t.dim() >= 1 && t.shape().back() == last.size) return;
  std::vector<Dim> expected;
  for (int d = 0; d + 1 < ref.dim(); ++d) expected.push_back({nullptr, ref.shape()[d], ref_name});
  expected.push_back(last);
  TS_FAIL("{}: {} has shape {}, expected {}", op_, name, t.shape_string(), describe(expected));
}

void OpCall::same_shape(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) const {
  TS_CHECK(t.shape() == ref.shape(), "{}: {} has shape {}, expected the shape of {}, {}", op_, name, t.shape_string(),
           ref_name, ref.shape_string());
}

void OpCall::per_row(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) const {
  int64_t n = 1;
  for (int d = 0; d + 1 < ref.dim(); ++d) n *= ref.shape()[d];
  bool leading = t.dim() + 1 == ref.dim();
  for (int d = 0; leading && d < t.dim(); ++d) leading = t.shape()[d] == ref.shape()[d];
  const bool flat = t.dim() == 1 && t.shape()[0] == n;
  TS_CHECK(leading || flat, "{}: {} has shape {}, expected the leading dims of {}, {}, or [N={}], one value per row",
           op_, name, t.shape_string(), ref_name, leading_shape(ref), n);
}

int OpCall::to_int(int64_t size, const char* what) const {
  TS_CHECK(size <= INT_MAX, "{}: {} = {} is above the kernels' limit of {} (int sizes)", op_, what, size, INT_MAX);
  return static_cast<int>(size);
}

}  // namespace tessera::ops::detail
