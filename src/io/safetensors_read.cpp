#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "io/safetensors.h"

namespace tessera::io {

namespace {

using nlohmann::json;

// Names the format defines that tessera has no dtype for: a clearer message than "unknown".
bool is_foreign_safetensors_dtype(std::string_view name) {
  for (std::string_view n : {"F64", "I64", "U64", "I16", "U16", "U32", "BOOL", "F8_E4M3", "F8_E5M2", "C64"}) {
    if (n == name) return true;
  }
  return false;
}

// An unsigned JSON integer, or an error naming the field.
uint64_t read_unsigned(const json& value, const std::string& path, const std::string& name, const char* field) {
  TS_CHECK(value.is_number_unsigned(), "safetensors file '{}': tensor '{}' has {} entry {}, expected a non-negative integer",
           path, name, field, value.dump());
  return value.get<uint64_t>();
}

SafeTensorEntry parse_entry(const std::string& path, const std::string& name, const json& spec, const char* data_begin,
                            uint64_t data_bytes, uint64_t* begin_out) {
  TS_CHECK(spec.is_object(), "safetensors file '{}': tensor '{}' is described by {}, expected an object", path, name,
           spec.type_name());
  for (const auto& [key, value] : spec.items()) {
    TS_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
             "safetensors file '{}': tensor '{}' has the unknown field '{}' (expected dtype, shape, data_offsets)", path,
             name, key);
  }
  TS_CHECK(spec.contains("dtype") && spec.contains("shape") && spec.contains("data_offsets"),
           "safetensors file '{}': tensor '{}' lacks one of dtype, shape, data_offsets", path, name);

  const json& dtype_json = spec["dtype"];
  TS_CHECK(dtype_json.is_string(), "safetensors file '{}': tensor '{}' has dtype {}, expected a string", path, name,
           dtype_json.dump());
  std::string dtype_text = dtype_json.get<std::string>();
  std::optional<DType> dtype = dtype_from_safetensors_name(dtype_text);
  TS_CHECK(dtype.has_value() || !is_foreign_safetensors_dtype(dtype_text),
           "safetensors file '{}': tensor '{}' has dtype {}, which tessera does not support (F32, BF16, F16, I32, I8, "
           "U8); convert it when saving",
           path, name, dtype_text);
  TS_CHECK(dtype.has_value(), "safetensors file '{}': tensor '{}' has the unknown dtype '{}'", path, name, dtype_text);

  const json& shape_json = spec["shape"];
  TS_CHECK(shape_json.is_array(), "safetensors file '{}': tensor '{}' has shape {}, expected an array", path, name,
           shape_json.dump());
  TS_CHECK(shape_json.size() <= 64, "safetensors file '{}': tensor '{}' has {} dimensions; at most 64 are accepted", path,
           name, shape_json.size());
  Shape shape;
  uint64_t numel = 1;
  // The product with empty dimensions counted as 1 bounds the strides of a tensor of this shape:
  // [0, 2^62, 2^62] has no element, but no tensor can have its strides.
  uint64_t span = 1;
  bool overflow = false;
  for (const json& d : shape_json) {
    uint64_t dim = read_unsigned(d, path, name, "shape");
    overflow = overflow || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
               __builtin_mul_overflow(numel, dim, &numel) || __builtin_mul_overflow(span, std::max<uint64_t>(dim, 1), &span) ||
               span > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    shape.push_back(static_cast<int64_t>(std::min<uint64_t>(dim, std::numeric_limits<int64_t>::max())));
  }
  uint64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &bytes);
  TS_CHECK(!overflow, "safetensors file '{}': tensor '{}' has shape {} whose size overflows", path, name, shape_json.dump());

  const json& offsets = spec["data_offsets"];
  TS_CHECK(offsets.is_array() && offsets.size() == 2,
           "safetensors file '{}': tensor '{}' has data_offsets {}, expected [begin, end]", path, name, offsets.dump());
  uint64_t begin = read_unsigned(offsets[0], path, name, "data_offsets");
  uint64_t end = read_unsigned(offsets[1], path, name, "data_offsets");
  TS_CHECK(begin <= end, "safetensors file '{}': tensor '{}' has data_offsets [{}, {}] that end before they begin", path,
           name, begin, end);
  TS_CHECK(end <= data_bytes,
           "safetensors file '{}': tensor '{}' has data_offsets [{}, {}] outside the data buffer of {} bytes (truncated "
           "file?)",
           path, name, begin, end, data_bytes);
  TS_CHECK(end - begin == bytes,
           "safetensors file '{}': tensor '{}' is {} {} = {} bytes but its data_offsets [{}, {}] span {} bytes", path, name,
           dtype_text, shape_json.dump(), bytes, begin, end, end - begin);

  *begin_out = begin;
  return SafeTensorEntry{name, *dtype, std::move(shape), data_begin + begin, static_cast<size_t>(bytes)};
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  SafeTensorsFile file;
  file.path_ = path;

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "safetensors file '{}': cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  int stat_rc = ::fstat(fd, &st);
  if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TS_FAIL("safetensors file '{}': not a regular file", path);
  }
  uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    TS_FAIL("safetensors file '{}': {} bytes, too short for the 8-byte header length (truncated or empty file)", path,
            file_bytes);
  }
  // Copy-on-write: views may be written to without changing the file.
  void* map = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  TS_CHECK(map != MAP_FAILED, "safetensors file '{}': cannot map {} bytes: {}", path, file_bytes, std::strerror(map_errno));
  file.map_ = map;
  file.map_bytes_ = file_bytes;
  file.parse(static_cast<const char*>(map), file_bytes);
  return file;
}

SafeTensorsFile SafeTensorsFile::from_bytes(std::vector<char> bytes, std::string name) {
  SafeTensorsFile file;
  file.path_ = std::move(name);
  file.owned_ = std::move(bytes);
  TS_CHECK(file.owned_.size() >= 8,
           "safetensors file '{}': {} bytes, too short for the 8-byte header length (truncated or empty file)",
           file.path_, file.owned_.size());
  file.parse(file.owned_.data(), file.owned_.size());
  return file;
}

void SafeTensorsFile::parse(const char* base, uint64_t file_bytes) {
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base, 8);  // little-endian, as the host (checked where written)
  TS_CHECK(header_bytes <= kSafeTensorsMaxHeaderBytes,
           "safetensors file '{}': header length {} is absurdly large (limit {}); the file is corrupt or not safetensors",
           path_, header_bytes, kSafeTensorsMaxHeaderBytes);
  TS_CHECK(header_bytes <= file_bytes - 8,
           "safetensors file '{}': header length {} runs past the end of the {}-byte file (truncated file?)", path_,
           header_bytes, file_bytes);

  json header;
  try {
    header = parse_json_bounded(std::string_view(base + 8, header_bytes),
                                fmt::format("safetensors file '{}': the header", path_));
  } catch (const json::exception& e) {
    TS_FAIL("safetensors file '{}': the header is not valid JSON: {}", path_, e.what());
  }
  TS_CHECK(header.is_object(), "safetensors file '{}': the header is a JSON {}, expected an object", path_,
           header.type_name());

  const char* data_begin = base + 8 + header_bytes;
  uint64_t data_bytes = file_bytes - 8 - header_bytes;
  std::vector<std::pair<uint64_t, SafeTensorEntry>> found;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      TS_CHECK(value.is_object(), "safetensors file '{}': __metadata__ is a JSON {}, expected an object of strings", path_,
               value.type_name());
      for (const auto& [mkey, mvalue] : value.items()) {
        TS_CHECK(mvalue.is_string(), "safetensors file '{}': metadata '{}' is {}, expected a string", path_, mkey,
                 mvalue.dump());
        metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0;
    SafeTensorEntry entry = parse_entry(path_, key, value, data_begin, data_bytes, &begin);
    found.emplace_back(begin, std::move(entry));
  }

  // The tensors must tile the data buffer: sorted by offset, each starts where the previous ended.
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.bytes < b.second.bytes;
  });
  uint64_t expected = 0;
  std::string previous = "(start of the data buffer)";
  for (auto& [begin, entry] : found) {
    TS_CHECK(begin >= expected, "safetensors file '{}': tensor '{}' at offset {} overlaps tensor '{}' that ends at {}",
             path_, entry.name, begin, previous, expected);
    TS_CHECK(begin == expected,
             "safetensors file '{}': {} unused bytes between '{}' and tensor '{}' at offset {}; the data buffer must "
             "have no holes",
             path_, begin - expected, previous, entry.name, begin);
    expected = begin + entry.bytes;
    previous = entry.name;
    index_[entry.name] = entries_.size();
    entries_.push_back(std::move(entry));
  }
  TS_CHECK(expected == data_bytes,
           "safetensors file '{}': the tensors cover {} of the {} data bytes; the rest belongs to no tensor", path_,
           expected, data_bytes);
}

SafeTensorsFile::SafeTensorsFile(SafeTensorsFile&& other) noexcept { *this = std::move(other); }

SafeTensorsFile& SafeTensorsFile::operator=(SafeTensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    owned_ = std::move(other.owned_);
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafeTensorsFile::~SafeTensorsFile() { release(); }

void SafeTensorsFile::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

std::vector<std::string> SafeTensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const SafeTensorEntry& e : entries_) out.push_back(e.name);
  return out;
}

bool SafeTensorsFile::has(const std::string& name) const { return index_.count(name) != 0; }

const SafeTensorEntry& SafeTensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  TS_CHECK(it != index_.end(), "safetensors file '{}': no tensor named '{}' ({} tensors in the file)", path_, name,
           entries_.size());
  return entries_[it->second];
}

const std::string& SafeTensorsFile::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  TS_CHECK(it != metadata_.end(), "safetensors file '{}': no metadata key '{}'", path_, key);
  return it->second;
}

Tensor SafeTensorsFile::view(const std::string& name, DType expected) const {
  const SafeTensorEntry& e = entry(name);
  TS_CHECK(e.dtype == expected, "safetensors file '{}': tensor '{}' is {}, read as {}", path_, name,
           safetensors_dtype_name(e.dtype), safetensors_dtype_name(expected));
  TS_CHECK(reinterpret_cast<uintptr_t>(e.data) % dtype_size(e.dtype) == 0,
           "safetensors file '{}': tensor '{}' is not aligned for {} in the file; use copy_to", path_, name,
           safetensors_dtype_name(e.dtype));
  // The mapping is private and writable, so handing out a mutable pointer cannot alter the file.
  return Tensor::from_external(const_cast<void*>(e.data), e.shape, e.dtype);
}

void SafeTensorsFile::copy_to(const std::string& name, Tensor& dst) const {
  const SafeTensorEntry& e = entry(name);
  TS_CHECK(dst.defined() && dst.is_contiguous(), "safetensors file '{}': copy of '{}' needs a contiguous destination",
           path_, name);
  TS_CHECK(dst.dtype() == e.dtype, "safetensors file '{}': tensor '{}' is {}, the destination is {}", path_, name,
           safetensors_dtype_name(e.dtype), safetensors_dtype_name(dst.dtype()));
  TS_CHECK(dst.shape() == e.shape, "safetensors file '{}': tensor '{}' has shape {}, the destination {}", path_, name,
           shape_to_string(e.shape), dst.shape_string());
  if (e.bytes > 0) std::memcpy(dst.raw(), e.data, e.bytes);
}

}  // namespace tessera::io
