#pragma once
// The MPI backend's insides, shared by its source files only: callers see Communicator and
// MpiRuntime. Every MPI call is checked with TS_MPI_CHECK, which names the call and file:line.
#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/watchdog.h"

#define TS_MPI_CHECK(call)                                                              \
  do {                                                                                  \
    const int ts_mpi_rc = (call);                                                       \
    if (ts_mpi_rc != MPI_SUCCESS) [[unlikely]] {                                        \
      ::tessera::dist::detail::fail_mpi(__FILE__, __LINE__, #call, ts_mpi_rc);          \
    }                                                                                   \
  } while (0)

namespace tessera::dist {

namespace detail {
[[noreturn]] void fail_mpi(const char* file, int line, const char* call, int code);
}  // namespace detail

struct MpiRuntime::Reductions {
  // [0]: bf16, [1]: f16; each sum, max, min, converting through f32.
  std::array<std::array<MPI_Op, 3>, 2> half{};
};

MPI_Datatype mpi_datatype(DType dtype);
// The MPI operation that reduces `dtype` by `op` (Avg maps to the sum; the caller divides).
MPI_Op mpi_reduce_op(const MpiRuntime::Reductions& reductions, DType dtype, ReduceOp op);

// Answers peers' questions about where this process is, so a rank whose watchdog fires can name
// the member that stalled instead of only itself. A thread probes a duplicate of the world for
// questions (a group's name) and replies with Watchdog::position_in; diagnose() asks the other
// members of a group and waits a little for their answers — a rank that does not answer is
// stopped or gone. Lives with the world communicator.
class StatusService {
 public:
  explicit StatusService(std::shared_ptr<Watchdog> watchdog);
  ~StatusService();
  StatusService(const StatusService&) = delete;
  StatusService& operator=(const StatusService&) = delete;

  std::string diagnose(const GroupInfo& group, OpKind kind, uint64_t seq, int peer);

 private:
  void serve();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::shared_ptr<Watchdog> watchdog_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`. Collective over `comm` when options.check_sequence is set.
  MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options, std::shared_ptr<Watchdog> watchdog,
                  const MpiRuntime& runtime, std::shared_ptr<StatusService> status = nullptr);
  ~MpiCommunicator() override;  // finishes every operation posted, then frees the MPI communicator

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& group_ranks() const override { return group_->ranks; }
  const std::string& name() const override { return group_->name; }
  CommStats stats() const override;
  const CommOptions& options() const override { return options_; }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::all_to_all;
  using Communicator::broadcast;
  using Communicator::recv;
  using Communicator::reduce_scatter;
  using Communicator::send;

  WorkPtr all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  WorkPtr reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                         ReduceOp op) override;
  WorkPtr all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype) override;
  WorkPtr broadcast(void* data, size_t count, DType dtype, int root) override;
  WorkPtr all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                     std::span<const size_t> recv_counts, DType dtype) override;
  WorkPtr send(const void* data, size_t count, DType dtype, int peer, int tag, std::string label) override;
  WorkPtr recv(void* data, size_t count, DType dtype, int peer, int tag, std::string label) override;
  WorkPtr barrier() override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  // An operation waiting for, or in, the progress thread.
  struct Op {
    WorkPtr work;
    OpKind kind = OpKind::Barrier;
    uint64_t seq = 0;
    int peer = -1;
    // Compared across the group under check_sequence: dtype, count, root, reduce op, counts hash.
    std::array<int64_t, 5> signature{};
    // Posts the non-blocking MPI calls (or runs a blocking one and posts none).
    std::function<void(std::vector<MPI_Request>&)> start;
    // Runs once the requests are complete (averaging, moving an in-place result).
    std::function<void()> finish;
    std::vector<MPI_Request> requests;
    uint64_t watch_token = 0;
    std::string label;     // send/recv: what the transfer is for (named by the watchdog)
    bool started = false;  // posted to MPI by the caller's thread; the progress thread only polls it
  };

 private:
  WorkPtr post(OpKind kind, int peer, uint64_t bytes, std::array<int64_t, 5> signature,
               std::function<void(std::vector<MPI_Request>&)> start, std::function<void()> finish = {},
               std::string label = {});
  void progress_loop();
  bool begin_op(Op& op);                    // false: failed before any request was posted
  bool poll_op(Op& op);                     // true: done (completed or failed)
  void check_in_step(const Op& op);         // the check_sequence all-gather
  std::function<void()> average(void* data, size_t count, DType dtype) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;     // a duplicate for the sequence check's own traffic
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<const GroupInfo> group_;
  CommOptions options_;
  std::shared_ptr<Watchdog> watchdog_;
  const MpiRuntime& runtime_;
  std::shared_ptr<StatusService> status_;  // the world communicator's only

  mutable std::mutex mutex_;                // guards everything below
  std::condition_variable queue_cv_;
  std::deque<std::unique_ptr<Op>> queue_;
  bool stop_ = false;
  uint64_t next_collective_ = 0;
  uint64_t next_p2p_ = 0;
  CommStats stats_;
  std::thread progress_;
};

}  // namespace tessera::dist
