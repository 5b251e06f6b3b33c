#pragma once
// Watchdog: one thread that watches every operation in flight on the communicators sharing it.
// When one runs longer than the timeout it prints a single line to stderr, e.g.
//   tessera watchdog: rank 1 of 4: all_reduce #17 on dp (group ranks 1,3) did not complete
//   within 5.0 s; rank 3 has not reached it (its last collective on dp: all_reduce #16, done);
//   aborting the job
// The part naming the rank that stalled comes from a diagnosis the backend provides (asking the
// peers where they are; MPI: mpi_status.cpp): the waiting rank knows only what it waits for.
// and calls the abort action. With the MPI backend that action is MPI_Abort on the world: the
// one place where tessera ends the process on its own, because a rank that waits forever for a
// peer that is gone, stalled or desynchronized is worse than a job that stops with a reason.
// (The abort action is a parameter so the watchdog can be tested without ending anything.)
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/ops.h"

namespace tessera::dist {

// What the watchdog names when an operation times out; shared by a communicator and its ops.
struct GroupInfo {
  std::string name;
  std::vector<int> ranks;  // world ranks
};

class Watchdog {
 public:
  using AbortAction = std::function<void(const std::string& message)>;
  // Says, for a late operation, which members of its group are elsewhere (may take a moment).
  using Diagnosis = std::function<std::string(const GroupInfo& group, OpKind kind, uint64_t seq, int peer)>;

  // `world_rank`/`world_size` go into the message; the checks run `timeout_seconds / 20` apart
  // (between 5 ms and 1 s), so a stall is reported at most 5% late.
  Watchdog(double timeout_seconds, int world_rank, int world_size, AbortAction abort);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // An operation starts / ends; begin returns the token for end. `peer` is for send/recv.
  // `label` (send/recv) says what the operation is for; the report names it.
  uint64_t begin(std::shared_ptr<const GroupInfo> group, OpKind kind, uint64_t seq, int peer = -1,
                 std::string label = {});
  void end(uint64_t token);

  double timeout_seconds() const { return timeout_; }
  size_t in_flight() const;

  void set_diagnosis(Diagnosis diagnosis);
  // Where this process is on the group named `group`: its last collective begun there, and
  // whether that is still in progress.
  struct Position {
    enum class State : uint8_t { None, InProgress, Done };
    State state = State::None;
    OpKind kind = OpKind::Barrier;
    uint64_t seq = 0;
  };
  Position position_in(const std::string& group) const;

 private:
  struct Entry {
    std::shared_ptr<const GroupInfo> group;
    OpKind kind;
    uint64_t seq;
    int peer;
    std::string label;
    std::chrono::steady_clock::time_point start;
    bool reported = false;
  };
  void run();
  std::string message(const Entry& e) const;

  const double timeout_;
  const int world_rank_;
  const int world_size_;
  const AbortAction abort_;
  Diagnosis diagnosis_;
  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  uint64_t next_token_ = 0;
  std::map<uint64_t, Entry> entries_;
  struct Last {
    OpKind kind;
    uint64_t seq;
    int in_flight = 0;
  };
  std::map<std::string, Last> positions_;  // group name -> its last collective begun here
  std::thread thread_;
};

}  // namespace tessera::dist
