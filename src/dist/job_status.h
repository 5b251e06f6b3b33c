#pragma once
// How the ranks of a job started by `tessera launch` tell it how they ended.
//
// mpirun turns a rank's non-zero exit into a job failure with a screen of its own text ("Primary
// job terminated normally, but 1 process returned a non-zero exit code... aborted"), even for
// exit 3, a stop with a checkpoint; and every rank that fails on the same bad config says so.
// Under the launcher, a rank that ends on its own (finished, stopped early, or failed before MPI
// started) instead leaves its exit code and message in a folder the launcher made, and exits 0;
// the launcher exits with the job's code and says each message once. Every rank also marks when
// it takes stop requests (so the launcher hands one on only when no rank would die of it) and
// when it reaches MPI's start-up (so a rank that never does is named by its number).
//
// Under a plain mpirun (or srun) there is no folder and the ranks exit with their own codes.
#include <optional>
#include <string>
#include <vector>

namespace tessera::dist {

// The environment variable that names the folder.
inline constexpr const char* kJobStatusVariable = "TESSERA_JOB_STATUS";

struct RankOutcome {
  int rank = 0;
  int exit_code = 0;
  std::string message;  // what the rank would have printed on failing; empty on success
};

class JobStatus {
 public:
  // The folder this process was given by its launcher, with its rank; none without a launcher.
  static std::optional<JobStatus> of_this_process();
  JobStatus(std::string dir, int rank) : dir_(std::move(dir)), rank_(rank) {}

  int rank() const { return rank_; }
  const std::string& dir() const { return dir_; }

  enum class Mark { TakesStopRequests, ReachedMpiStart };

  void record_outcome(int exit_code, const std::string& message) const;
  void mark(Mark what) const;

  // Read by any process: every rank's recorded outcome (by rank), and the ranks of `size` that
  // have not made the mark.
  std::vector<RankOutcome> outcomes() const;
  std::vector<int> ranks_without(Mark what, int size) const;

 private:
  std::string dir_;
  int rank_ = 0;
};

// The exit code of a job from its ranks' outcomes: an error (1) wins over a bad command line (2),
// which wins over a stop with a checkpoint (3); 0 when every rank that recorded finished.
int job_exit_code(const std::vector<RankOutcome>& outcomes);

// What the launcher says after the job: the messages of ranks other than 0 (rank 0 printed its
// own), each different text once with the ranks that said it ("ranks 1-3: error: ...").
std::vector<std::string> messages_to_repeat(const std::vector<RankOutcome>& outcomes);

// "1", "1, 3", "1-3, 5": a list of ranks as words.
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace tessera::dist
