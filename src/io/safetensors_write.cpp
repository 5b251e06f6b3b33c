#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

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

void SafeTensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, const void* data, size_t bytes) {
  TS_CHECK(!name.empty(), "safetensors: a tensor needs a non-empty name");
  TS_CHECK(name != "__metadata__", "safetensors: '__metadata__' is reserved for the metadata; rename the tensor");
  for (const Item& item : items_) TS_CHECK(item.name != name, "safetensors: tensor '{}' added twice", name);
  for (int64_t d : shape) TS_CHECK(d >= 0, "safetensors: tensor '{}' has a negative dimension in {}", name, shape_to_string(shape));
  size_t expected = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  TS_CHECK(bytes == expected, "safetensors: tensor '{}' {} {} needs {} bytes, got {}", name, dtype_name(dtype),
           shape_to_string(shape), expected, bytes);
  TS_CHECK(data != nullptr || bytes == 0, "safetensors: tensor '{}' has no data", name);
  items_.push_back(Item{name, dtype, shape, data, bytes, Tensor()});
}

void SafeTensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

namespace {

// Writes all of `bytes`, retrying short writes and interrupted calls.
void write_all(int fd, const void* data, size_t bytes, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK(n > 0, "safetensors: writing '{}' failed: {} (is the disk full?)", tmp, std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

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

  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // A hidden name beside the target, so the rename stays within one file system.
  std::string tmp_leaf = target.filename().string();
  tmp_leaf.insert(tmp_leaf.begin(), '.');
  tmp_leaf.append(".tmp-XXXXXX");
  std::string tmp_template = (dir / tmp_leaf).string();
  std::vector<char> tmp_name(tmp_template.begin(), tmp_template.end());
  tmp_name.push_back('\0');
  int fd = ::mkstemp(tmp_name.data());
  TS_CHECK(fd >= 0, "safetensors: cannot create a file in '{}' to write '{}': {}", dir.string(), path, std::strerror(errno));
  std::string tmp(tmp_name.data());
  try {
    write_all(fd, &header_len, sizeof(header_len), tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const Item* item : order) write_all(fd, item->data, item->bytes, tmp);
    TS_CHECK(::fsync(fd) == 0, "safetensors: fsync of '{}' failed: {}", tmp, std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    TS_CHECK(rc == 0, "safetensors: closing '{}' failed: {}", tmp, std::strerror(errno));
    TS_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "safetensors: renaming '{}' to '{}' failed: {}", tmp, path,
             std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the folder's entry is on disk.
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace tessera::io
