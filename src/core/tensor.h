#pragma once
// Tensor: a shape and strides over shared, reference-counted storage. Views (slice, reshape,
// transpose) share storage and never copy; contiguous() copies only when it must. Storage comes
// from a MemoryAccountant with a tag, so every tensor's bytes are counted under a category.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/tier.h"

namespace tessera {

enum class Device : uint8_t { CPU, CUDA };
using Shape = std::vector<int64_t>;

// Bytes a tensor's views share, and where they live. Kernels read only storage in the compute
// tier; a mover (exec/activation_offload.h) copies the bytes to another tier, then evicts the
// compute copy, and later makes it resident again and copies them back. Every view of the storage
// sees the bytes move: views reach them through the storage, never keep the pointer.
class Storage {
 public:
  Storage(MemoryAccountant& accountant, size_t bytes, MemoryTag tag);
  // Non-owning storage over memory someone else keeps alive (e.g. a loaded file).
  Storage(void* external, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    TS_CHECK(tier_ == Tier::Compute && !encoded_, "a tensor was read while its {} bytes live {}; whoever moved them "
             "must bring them back before the tensor is read", bytes_,
             encoded_ ? std::string("encoded") : fmt::format("in the {} tier", tier_name(tier_)));
    return data_;
  }
  size_t bytes() const { return bytes_; }
  MemoryTag tag() const { return tag_; }
  Tier tier() const { return tier_; }
  // Whether its compute memory may be given up (owned storage; external memory stays).
  bool movable() const { return accountant_ != nullptr; }

  // The bytes are now in `tier` (copied there by the caller): the compute copy is freed.
  void evict(Tier tier);
  // The bytes are now held in another form (exec/activation_encoding.h, in a storage of its
  // own): the compute copy is freed until make_resident() gives the decoder memory to fill.
  void release_encoded();
  bool encoded() const { return encoded_; }
  // Compute memory again, for the caller to copy (or decode) the bytes back into; returns it.
  void* make_resident();

 private:
  MemoryAccountant* accountant_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryTag tag_ = MemoryTag::Workspace;
  Tier tier_ = Tier::Compute;
  bool encoded_ = false;
};

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, bf16>) return DType::BF16;
  else if constexpr (std::is_same_v<T, f16>) return DType::F16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::I8;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::U8;
  else static_assert(sizeof(T) == 0, "no tessera dtype for this C++ type");
}

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, MemoryTag tag, MemoryAccountant& accountant);
  static Tensor zeros(const Shape& shape, DType dtype, MemoryTag tag, MemoryAccountant& accountant);
  static Tensor from_external(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return Device::CPU; }
  MemoryTag tag() const { return storage_->tag(); }
  bool is_contiguous() const;
  std::string shape_string() const;

  // Typed pointer to the first element; checks the dtype so a bf16 tensor is never read as f32.
  template <class T>
  T* data() const {
    TS_CHECK(defined(), "access to the data of an undefined tensor");
    TS_CHECK(dtype_ == dtype_of<T>(), "tensor has dtype {}, read as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw()) ;
  }
  void* raw() const { return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_)); }
  // The storage its bytes are in (shared with its views), for what moves it between tiers.
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  Tensor slice(int d, int64_t start, int64_t end) const;  // [start, end) along d, shares storage
  Tensor reshape(const Shape& shape) const;               // view; needs a contiguous tensor
  Tensor transpose(int d0, int d1) const;                 // view with swapped strides
  Tensor contiguous(MemoryAccountant& accountant, MemoryTag tag) const;  // this if already contiguous
  void copy_from(const Tensor& src);                      // same shape and dtype, any strides
  void fill_zero();                                       // contiguous tensors

  // Checks the shape with a message naming the tensor; -1 matches any size.
  void expect_shape(const Shape& expected, const char* what) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
};

std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

}  // namespace tessera
