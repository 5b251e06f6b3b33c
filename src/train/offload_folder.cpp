#include "train/offload_folder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "core/check.h"

namespace fs = std::filesystem;

namespace tessera::train {

OffloadFolder::OffloadFolder(const std::string& configured, const std::string& out_dir, int rank) {
  std::error_code ec;
  if (configured.empty()) {
    folder_ = (fs::path(out_dir) / "offload").string();
    fs::create_directories(folder_, ec);
    TS_CHECK(!ec, "cannot make the offload folder '{}': {}; set memory.offload_dir to a folder on a disk with room",
             folder_, ec.message());
  } else {
    folder_ = configured;
    TS_CHECK(fs::exists(folder_, ec), "memory.offload_dir '{}' does not exist; make it (on a fast disk with room for "
             "what the run offloads) or leave the key out for <train.out_dir>/offload", folder_);
    TS_CHECK(fs::is_directory(folder_, ec), "memory.offload_dir '{}' is not a folder; give a folder", folder_);
  }
  // Writable: a probe file, which also catches a read-only mount that access() would not.
  const fs::path probe = fs::path(folder_) / fmt::format(".probe-{}-{}", ::getpid(), rank);
  {
    FILE* f = std::fopen(probe.c_str(), "w");
    TS_CHECK(f != nullptr, "memory.offload_dir '{}' is not writable; give a folder this run may write", folder_);
    std::fclose(f);
    fs::remove(probe, ec);
  }
  std::string holder;
  lock_ = FolderLock::try_take((fs::path(folder_) / fmt::format(".lock.rank{}", rank)).string(),
                               fmt::format("the offload folder '{}'", folder_), holder);
  TS_CHECK(lock_.has_value(), "the offload folder '{}' is in use by another live run ({}); give this run another "
           "memory.offload_dir", folder_, holder.empty() ? "holder unknown" : holder);
  // Holding the rank's lock, every subfolder of this rank is an earlier process's leftover.
  const std::string prefix = fmt::format("rank{}-", rank);
  for (const fs::directory_entry& e : fs::directory_iterator(folder_, ec)) {
    if (e.is_directory() && e.path().filename().string().starts_with(prefix)) fs::remove_all(e.path(), ec);
  }
  scratch_ = (fs::path(folder_) / fmt::format("{}{}", prefix, ::getpid())).string();
  fs::create_directories(scratch_, ec);
  TS_CHECK(!ec, "cannot make '{}' in the offload folder: {}", scratch_, ec.message());
}

OffloadFolder::~OffloadFolder() {
  std::error_code ec;
  fs::remove_all(scratch_, ec);
}

}  // namespace tessera::train
