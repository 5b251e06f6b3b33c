#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "io/safetensors.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian numbers; tessera writes them as they lie in memory");

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8}) {
    if (safetensors_dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

void SafeTensorsWriter::add(const std::string& name, const Tensor& tensor) {
  TS_CHECK(tensor.defined(), "safetensors: tensor '{}' is undefined", name);
  TS_CHECK(tensor.is_contiguous(), "safetensors: tensor '{}' {} is not contiguous; pass tensor.contiguous(...)", name,
           tensor.shape_string());
  add(name, tensor.dtype(), tensor.shape(), tensor.raw(), tensor.nbytes());
  items_.back().keep_alive = tensor;
}

void SafeTensorsWriter::check_new_item(const std::string& name, DType dtype, const Shape& shape, size_t bytes) {
  TS_CHECK(!name.empty(), "safetensors: a tensor needs a non-empty name");
  TS_CHECK(name != "__metadata__", "safetensors: '__metadata__' is reserved for the metadata; rename the tensor");
  TS_CHECK(!names_.contains(name), "safetensors: tensor '{}' added twice", name);
  for (int64_t d : shape) TS_CHECK(d >= 0, "safetensors: tensor '{}' has a negative dimension in {}", name, shape_to_string(shape));
  size_t expected = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  TS_CHECK(bytes == expected, "safetensors: tensor '{}' {} {} needs {} bytes, got {}", name, dtype_name(dtype),
           shape_to_string(shape), expected, bytes);
}

void SafeTensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, const void* data, size_t bytes) {
  check_new_item(name, dtype, shape, bytes);
  TS_CHECK(data != nullptr || bytes == 0, "safetensors: tensor '{}' has no data", name);
  items_.push_back(Item{name, dtype, shape, data, bytes, Tensor(), nullptr});
  names_.insert(name);
}

void SafeTensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, size_t bytes, Producer produce) {
  check_new_item(name, dtype, shape, bytes);
  TS_CHECK(produce != nullptr, "safetensors: deferred tensor '{}' has no producer", name);
  items_.push_back(Item{name, dtype, shape, nullptr, bytes, Tensor(), std::move(produce)});
  names_.insert(name);
}

void SafeTensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafeTensorsWriter::write(const std::string& path) const {
  // Data in order of decreasing element size keeps every tensor aligned for its dtype, given the
  // 8-byte aligned start of the buffer; the format forbids padding between tensors.
  std::vector<const Item*> order;
  for (const Item& item : items_) order.push_back(&item);
  std::stable_sort(order.begin(), order.end(),
                   [](const Item* a, const Item* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });

  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const Item* item : order) {
    header[item->name] = {{"dtype", std::string(safetensors_dtype_name(item->dtype))},
                          {"shape", item->shape},
                          {"data_offsets", {offset, offset + item->bytes}}};
    offset += item->bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("safetensors: cannot write '{}': a tensor name or metadata string is not valid UTF-8 ({})", path, e.what());
  }
  // Padding the header with spaces to a multiple of 8 aligns the data buffer.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  uint64_t header_len = text.size();

  AtomicFile file(path);
  file.write(&header_len, sizeof(header_len));
  file.write(text.data(), text.size());
  for (const Item* item : order) {
    if (!item->produce) {
      file.write(item->data, item->bytes);
      continue;
    }
    // Released at the end of this iteration, before the next producer runs.
    const Tensor bytes = item->produce();
    TS_CHECK(bytes.defined() && bytes.is_contiguous() && bytes.dtype() == item->dtype && bytes.nbytes() == item->bytes,
             "safetensors: the producer of '{}' ({} {}, {} bytes) made {}", item->name, dtype_name(item->dtype),
             shape_to_string(item->shape), item->bytes,
             bytes.defined() ? fmt::format("a{} {} tensor {} of {} bytes", bytes.is_contiguous() ? "" : " non-contiguous",
                                           dtype_name(bytes.dtype()), bytes.shape_string(), bytes.nbytes())
                             : std::string("no tensor"));
    file.write(bytes.raw(), item->bytes);
  }
  file.commit();
}

}  // namespace tessera::io
