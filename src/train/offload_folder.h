#pragma once
// The nvme tier's folder of a run (memory.offload_dir; "": <train.out_dir>/offload, made when
// needed). Checked at start — missing, not a folder or read-only is refused naming the fix —, and
// locked per rank, so that no other live run shares it. Each rank keeps its scratch files in a
// subfolder of its own, removed at exit; a subfolder an earlier process of the same rank left
// (killed, say) is removed first, so scratch files never pile up over restarts. Scratch files are
// never read back across a restart: checkpoints hold everything a run resumes from.
#include <optional>
#include <string>

#include "train/folder_lock.h"

namespace tessera::train {

class OffloadFolder {
 public:
  // `configured`: memory.offload_dir as given; `out_dir`: train.out_dir.
  OffloadFolder(const std::string& configured, const std::string& out_dir, int rank);
  ~OffloadFolder();
  OffloadFolder(const OffloadFolder&) = delete;
  OffloadFolder& operator=(const OffloadFolder&) = delete;

  const std::string& folder() const { return folder_; }    // the tier's folder
  const std::string& scratch() const { return scratch_; }  // this rank's subfolder in it

 private:
  std::string folder_, scratch_;
  std::optional<FolderLock> lock_;
};

}  // namespace tessera::train
