#pragma once
// The run folder (train.out_dir): config.toml, metrics.jsonl, loss.svg, checkpoints/ and, with
// log.timeline, timeline.json, and with log.profile, trace.json and profile.txt of one run.
// One trainer at a time may write it: opening it takes an exclusive lock (flock on .lock, released
// by the kernel when the process ends, however it ends), and a second trainer is refused, naming
// the holder's process and host. A folder that already holds a run is not overwritten by accident:
// the trainer resumes it, starts over only when told to (train.overwrite), or refuses.
#include <optional>
#include <string>

#include "train/folder_lock.h"

namespace tessera::train {

class RunFolder {
 public:
  // Checks the path (not empty, not a file), creates the folder and takes its lock.
  explicit RunFolder(std::string path);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::string& path() const { return path_; }
  std::string metrics_path() const;
  std::string chart_path() const;
  std::string config_path() const;
  std::string checkpoints_dir() const;
  std::string timeline_path() const;  // timeline.json (log.timeline)
  std::string trace_path() const;     // trace.json (log.profile)
  std::string profile_path() const;   // profile.txt (log.profile)

  // What an earlier run left here: a metrics log or a checkpoint (a short description), if any.
  std::optional<std::string> earlier_run() const;
  // Removes what an earlier run left (metrics, chart, config, timeline, checkpoints); keeps the lock.
  void clear();

 private:
  std::string path_;
  std::optional<FolderLock> lock_;
};

}  // namespace tessera::train
