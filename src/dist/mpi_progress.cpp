// The MPI backend, progress side: one thread per communicator posts the queued operations in
// order as non-blocking MPI calls and polls every operation in flight until it completes. MPI only
// advances a non-blocking collective inside MPI calls, so without this thread an all-reduce
// posted before a long computation would sit idle until wait(); with it the transfer runs while
// the caller computes. Between polls that find nothing done the thread backs off (yield, then
// sleeps growing to CommOptions::max_poll_interval_us) so that it leaves the cores to the
// computation it overlaps; it sleeps without polling when nothing is in flight.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <list>

#include "core/check.h"
#include "dist/mpi_detail.h"

namespace tessera::dist {

namespace {

constexpr int kSpinPolls = 32;  // polls that only yield before the thread starts to sleep

std::string describe_call(OpKind kind, uint64_t seq, const std::array<int64_t, 5>& sig) {
  const auto dtype = dtype_name(static_cast<DType>(sig[0]));
  std::string s = fmt::format("{} #{}", op_name(kind), seq);
  switch (kind) {
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
      s += fmt::format(" ({}, {} elements, {}", dtype, sig[1], reduce_op_name(static_cast<ReduceOp>(sig[3])));
      if (kind == OpKind::ReduceScatter) s += fmt::format(", chunk layout {:x}", sig[4] & 0xffffff);
      return s + ")";
    case OpKind::AllGather: return s + fmt::format(" ({}, {} elements, chunk layout {:x})", dtype, sig[1], sig[4] & 0xffffff);
    case OpKind::Broadcast: return s + fmt::format(" ({}, {} elements, root {})", dtype, sig[1], sig[2]);
    case OpKind::AllToAll: return s + fmt::format(" ({})", dtype);
    default: return s;
  }
}

}  // namespace

void MpiCommunicator::check_in_step(const Op& op) {
  constexpr int kWords = 7;
  std::array<int64_t, kWords> mine{static_cast<int64_t>(op.seq), static_cast<int64_t>(op.kind)};
  std::copy(op.signature.begin(), op.signature.end(), mine.begin() + 2);
  std::vector<int64_t> all(static_cast<size_t>(kWords * size_));
  TS_MPI_CHECK(MPI_Allgather(mine.data(), kWords, MPI_INT64_T, all.data(), kWords, MPI_INT64_T, check_comm_));
  bool same = true;
  for (int r = 1; r < size_ && same; ++r) {
    same = std::equal(all.begin(), all.begin() + kWords, all.begin() + r * kWords);
  }
  if (same) return;
  std::string calls;
  for (int r = 0; r < size_; ++r) {
    const int64_t* w = all.data() + r * kWords;
    std::array<int64_t, 5> sig{};
    std::copy(w + 2, w + kWords, sig.begin());
    calls += fmt::format("{}rank {} calls {}", r == 0 ? "" : "; ", r,
                         describe_call(static_cast<OpKind>(w[1]), static_cast<uint64_t>(w[0]), sig));
  }
  TS_FAIL("collectives out of step on '{}' (group ranks {}): {}. Every member must call the same collectives, with "
          "the same arguments, in the same order",
          name(), format_ranks(group_ranks()), calls);
}

bool MpiCommunicator::begin_op(Op& op) {
  op.watch_token = watchdog_->begin(group_, op.kind, op.seq, op.peer, op.label);
  try {
    if (options_.check_sequence && is_collective(op.kind)) check_in_step(op);
    op.start(op.requests);
    op.work->mark_started();
    return true;
  } catch (...) {
    watchdog_->end(op.watch_token);
    op.work->mark_failed(std::current_exception());
    return false;
  }
}

bool MpiCommunicator::poll_op(Op& op) {
  int done = 0;
  MPI_Status status{};
  int rc = MPI_SUCCESS;
  if (op.requests.size() == 1) {
    rc = MPI_Test(op.requests.data(), &done, &status);
  } else {
    rc = MPI_Testall(static_cast<int>(op.requests.size()), op.requests.data(), &done, MPI_STATUSES_IGNORE);
  }
  if (rc == MPI_SUCCESS && !done) return false;
  watchdog_->end(op.watch_token);
  try {
    TS_MPI_CHECK(rc);
    if (op.kind == OpKind::Recv) {
      int received = 0;
      TS_MPI_CHECK(MPI_Get_count(&status, mpi_datatype(static_cast<DType>(op.signature[0])), &received));
      TS_CHECK(received == op.signature[1],
               "recv #{} on '{}' expected {} elements from rank {} and got {}: the send and the recv disagree", op.seq,
               name(), op.signature[1], op.peer, received);
    }
    if (op.finish) op.finish();
    op.work->mark_completed();
  } catch (...) {
    op.work->mark_failed(std::current_exception());
  }
  return true;
}

void MpiCommunicator::progress_loop() {
  using std::chrono::microseconds;
  std::list<std::unique_ptr<Op>> active;
  const microseconds max_pause{options_.max_poll_interval_us};
  microseconds pause{0};
  int idle_polls = 0;
  for (;;) {
    std::deque<std::unique_ptr<Op>> fresh;
    {
      std::unique_lock lock(mutex_);
      auto ready = [&] { return stop_ || !queue_.empty(); };
      if (active.empty()) {
        queue_cv_.wait(lock, ready);
      } else if (pause.count() > 0) {
        queue_cv_.wait_for(lock, pause, ready);
      }
      fresh.swap(queue_);
      if (stop_ && fresh.empty() && active.empty()) return;
    }
    bool progressed = !fresh.empty();
    for (auto& op : fresh) {
      if (op->started || begin_op(*op)) active.push_back(std::move(op));
    }
    for (auto it = active.begin(); it != active.end();) {
      if (poll_op(**it)) {
        it = active.erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
    if (progressed) {
      idle_polls = 0;
      pause = microseconds{0};
    } else if (++idle_polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      pause = std::min(max_pause, std::max(microseconds{5}, pause * 2));
      if (pause.count() == 0) std::this_thread::yield();
    }
  }
}

}  // namespace tessera::dist
