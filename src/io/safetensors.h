#pragma once
// The safetensors format (the tensor file of the Hugging Face ecosystem, also read by PyTorch
// tooling): an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// and then the data buffer; offsets are relative to its start. The tensors tile the buffer
// exactly (no holes, no overlap), which the reader enforces, so a file has one meaning only.
//
// Reading trusts nothing in the file: every length, offset, shape and dtype is checked against
// the file size before any byte is used, and a bad file fails with a tessera::Error naming the
// file and the problem. The file is memory-mapped copy-on-write, so opening a large checkpoint
// costs no copy and writes through a view never reach the file.
#include <cstddef>
#include <functional>
#include <map>
#include <unordered_set>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tessera::io {

// The format's dtype names ("F32", "BF16", "F16", "I32", "I8", "U8") for tessera's dtypes.
std::string_view safetensors_dtype_name(DType dtype);
// nullopt for a name tessera has no dtype for.
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

struct SafeTensorEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;  // inside the mapped file; may be unaligned for the dtype
  size_t bytes = 0;
};

class SafeTensorsWriter {
 public:
  // Records a contiguous tensor; its storage is kept alive by the writer until write().
  void add(const std::string& name, const Tensor& tensor);
  // Records raw bytes; `data` must stay valid until write() returns.
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data, size_t bytes);
  // Makes a deferred item's bytes when write() reaches it: a contiguous tensor of the item's dtype
  // and byte count (a view of something alive, or a fresh buffer).
  using Producer = std::function<Tensor()>;
  // Records an item whose bytes exist only while write() writes it: `produce` is called once, in
  // file order, and its tensor released before the next item's producer runs. A file of items that
  // do not fit in memory together (a model streamed from the nvme tier) is written holding one.
  void add(const std::string& name, DType dtype, const Shape& shape, size_t bytes, Producer produce);
  void set_metadata(const std::string& key, const std::string& value);

  // Writes the file atomically: a temporary file in the same folder, fsync, rename over `path`,
  // fsync of the folder. A crash leaves either the old file or the new one, never a partial one.
  // Fails when a producer's tensor is not the item it announced.
  void write(const std::string& path) const;

  size_t size() const { return items_.size(); }

 private:
  struct Item {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;  // null for a deferred item
    size_t bytes;
    Tensor keep_alive;
    Producer produce;  // set for a deferred item
  };
  // Checks an item's name, shape and byte count, and records the name.
  void check_new_item(const std::string& name, DType dtype, const Shape& shape, size_t bytes);
  std::vector<Item> items_;
  std::unordered_set<std::string> names_;  // a model of many thousand layers has as many tensors
  std::map<std::string, std::string> metadata_;
};

class SafeTensorsFile {
 public:
  // Maps and validates the whole header; throws tessera::Error on any inconsistency.
  static SafeTensorsFile open(const std::string& path);
  // The same checks on a file's bytes in memory, which the object keeps; `name` stands for the
  // file in messages.
  static SafeTensorsFile from_bytes(std::vector<char> bytes, std::string name);

  SafeTensorsFile(SafeTensorsFile&&) noexcept;
  SafeTensorsFile& operator=(SafeTensorsFile&&) noexcept;
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;
  ~SafeTensorsFile();

  const std::string& path() const { return path_; }
  // Names in data order (ascending offset).
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  const SafeTensorEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Metadata value, or an error naming the missing key.
  const std::string& metadata_value(const std::string& key) const;

  // A tensor over the file's bytes, valid while this object lives. Fails when the stored dtype is
  // not `expected` or the data is not aligned for the dtype (then use copy_to).
  Tensor view(const std::string& name, DType expected) const;
  // Copies the tensor into `dst` (contiguous), checking dtype and shape; works for any alignment.
  void copy_to(const std::string& name, Tensor& dst) const;

 private:
  SafeTensorsFile() = default;
  // Validates the header of the whole file's bytes and fills entries_ and metadata_.
  void parse(const char* base, uint64_t file_bytes);
  void release();

  std::string path_;
  void* map_ = nullptr;     // the mapped file (open), or null
  size_t map_bytes_ = 0;
  std::vector<char> owned_;  // the bytes (from_bytes); a vector keeps its buffer when moved
  std::vector<SafeTensorEntry> entries_;  // ascending offset
  std::map<std::string, size_t> index_;   // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// Largest header accepted: far above any real model's tensor list, small enough that a corrupt
// length cannot make the reader parse gigabytes.
inline constexpr uint64_t kSafeTensorsMaxHeaderBytes = 100'000'000;

}  // namespace tessera::io
