#include "core/tensor.h"

#include <algorithm>
#include <cstring>

namespace tessera {

Storage::Storage(MemoryAccountant& accountant, size_t bytes, MemoryTag tag)
    : accountant_(&accountant), data_(accountant.allocate(bytes, tag)), bytes_(bytes), tag_(tag) {}

Storage::Storage(void* external, size_t bytes) : data_(external), bytes_(bytes) {}

Storage::~Storage() {
  if (accountant_ != nullptr && tier_ == Tier::Compute) accountant_->deallocate(data_, bytes_, tag_);
}

void Storage::evict(Tier tier) {
  TS_CHECK(movable(), "storage of {} bytes over external memory cannot leave it", bytes_);
  TS_CHECK(tier_ == Tier::Compute && tier != Tier::Compute, "storage of {} bytes evicted from the {} tier to the {} "
           "tier", bytes_, tier_name(tier_), tier_name(tier));
  accountant_->deallocate(data_, bytes_, tag_);
  data_ = nullptr;
  tier_ = tier;
}

void Storage::release_encoded() {
  TS_CHECK(movable(), "storage of {} bytes over external memory cannot be released for an encoding", bytes_);
  TS_CHECK(tier_ == Tier::Compute && !encoded_, "storage of {} bytes released for an encoding while {}", bytes_,
           encoded_ ? std::string("already encoded") : fmt::format("in the {} tier", tier_name(tier_)));
  accountant_->deallocate(data_, bytes_, tag_);
  data_ = nullptr;
  encoded_ = true;
}

void* Storage::make_resident() {
  TS_CHECK(tier_ != Tier::Compute || encoded_, "storage of {} bytes made resident twice", bytes_);
  data_ = accountant_->allocate(bytes_, tag_);
  tier_ = Tier::Compute;
  encoded_ = false;
  return data_;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}
void check_shape_valid(const Shape& shape) {
  // The product of the dimensions, an empty one counted as 1, bounds every stride: a shape such as
  // [0, 2^62, 2^62] holds no element yet its strides would overflow.
  int64_t span = 1;
  for (int64_t d : shape) {
    TS_CHECK(d >= 0, "negative dimension in shape {}", shape_to_string(shape));
    TS_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span),
             "shape {} is too large: its strides do not fit 64 bits", shape_to_string(shape));
  }
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryTag tag, MemoryAccountant& accountant) {
  check_shape_valid(shape);
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(accountant, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), tag);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryTag tag, MemoryAccountant& accountant) {
  Tensor t = empty(shape, dtype, tag, accountant);
  t.fill_zero();
  return t;
}

Tensor Tensor::from_external(void* data, const Shape& shape, DType dtype) {
  check_shape_valid(shape);
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  return t;
}

int64_t Tensor::size(int d) const {
  TS_CHECK(d >= 0 && d < dim(), "dimension {} out of range for a tensor of shape {}", d, shape_to_string(shape_));
  return shape_[static_cast<size_t>(d)];
}

int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  TS_CHECK(d >= 0 && d < dim(), "slice dimension {} out of range for shape {}", d, shape_string());
  TS_CHECK(0 <= start && start <= end && end <= shape_[static_cast<size_t>(d)],
           "slice [{}, {}) out of range for dimension {} of shape {}", start, end, d, shape_string());
  Tensor t = *this;
  t.offset_ += start * strides_[static_cast<size_t>(d)];
  t.shape_[static_cast<size_t>(d)] = end - start;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  TS_CHECK(shape_numel(shape) == numel(), "cannot reshape {} ({} elements) to {} ({} elements)", shape_string(), numel(),
           shape_to_string(shape), shape_numel(shape));
  TS_CHECK(is_contiguous(), "reshape of the non-contiguous tensor {} needs contiguous() first", shape_string());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  TS_CHECK(d0 >= 0 && d0 < dim() && d1 >= 0 && d1 < dim(), "transpose({}, {}) out of range for shape {}", d0, d1,
           shape_string());
  Tensor t = *this;
  std::swap(t.shape_[static_cast<size_t>(d0)], t.shape_[static_cast<size_t>(d1)]);
  std::swap(t.strides_[static_cast<size_t>(d0)], t.strides_[static_cast<size_t>(d1)]);
  return t;
}

namespace {
void strided_copy(char* dst, const Shape& dst_strides, const char* src, const Shape& src_strides, const Shape& shape,
                  size_t dim, size_t elem) {
  if (shape.empty()) {
    std::memcpy(dst, src, elem);
    return;
  }
  int64_t n = shape[dim];
  if (dim + 1 == shape.size()) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * dst_strides[dim] * static_cast<int64_t>(elem),
                  src + i * src_strides[dim] * static_cast<int64_t>(elem), elem);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    strided_copy(dst + i * dst_strides[dim] * static_cast<int64_t>(elem), dst_strides,
                 src + i * src_strides[dim] * static_cast<int64_t>(elem), src_strides, shape, dim + 1, elem);
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  TS_CHECK(src.shape_ == shape_, "copy from {} into {}: shapes differ", src.shape_string(), shape_string());
  TS_CHECK(src.dtype_ == dtype_, "copy from {} into {}: dtypes differ", dtype_name(src.dtype_), dtype_name(dtype_));
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  strided_copy(static_cast<char*>(raw()), strides_, static_cast<const char*>(src.raw()), src.strides_, shape_, 0,
               dtype_size(dtype_));
}

Tensor Tensor::contiguous(MemoryAccountant& accountant, MemoryTag tag) const {
  if (is_contiguous()) return *this;
  Tensor t = empty(shape_, dtype_, tag, accountant);
  t.copy_from(*this);
  return t;
}

void Tensor::fill_zero() {
  TS_CHECK(is_contiguous(), "fill_zero needs a contiguous tensor, got strides of {}", shape_string());
  std::memset(raw(), 0, nbytes());
}

void Tensor::expect_shape(const Shape& expected, const char* what) const {
  bool ok = expected.size() == shape_.size();
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = expected[i] == -1 || expected[i] == shape_[i];
  TS_CHECK(ok, "shape mismatch for {}: expected {}, got {}", what, shape_to_string(expected), shape_string());
}

}  // namespace tessera
