#pragma once
// Files that are replaced whole or not at all. An AtomicFile writes into a hidden temporary file
// beside the target; commit() syncs it, renames it over the target and syncs the folder, so a
// crash at any moment leaves readers the old file or the new one, never a part. Dropping an
// uncommitted AtomicFile removes the temporary file. Every file tessera writes for later reading
// (checkpoints, token files, tokenizers, manifests, charts) goes through here.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();

 private:
  std::filesystem::path target_;
  std::string tmp_;
  int fd_ = -1;
};

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);
// fsync of a file or folder (a folder's sync makes renames and new entries in it durable).
void sync_path(const std::filesystem::path& path);

}  // namespace tessera
