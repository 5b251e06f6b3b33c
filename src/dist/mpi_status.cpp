// The MPI backend's status service (mpi_detail.h): who is where, for the watchdog's message.
#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "core/check.h"
#include "dist/mpi_detail.h"

namespace tessera::dist {

namespace {
constexpr int kAskTag = 1;
constexpr int kAnswerTag = 2;
constexpr int kMaxText = 256;  // a group's name
// How long a diagnosis waits for answers: a rank that is alive answers within milliseconds.
constexpr double kAnswerSeconds = 1.5;
}  // namespace

StatusService::StatusService(std::shared_ptr<Watchdog> watchdog) : watchdog_(std::move(watchdog)) {
  TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  TS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  thread_ = std::thread([this] { serve(); });
}

StatusService::~StatusService() {
  stop_ = true;
  thread_.join();
  MPI_Comm_free(&comm_);
}

void StatusService::serve() {
  while (!stop_) {
    int flag = 0;
    MPI_Status probe;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, comm_, &flag, &probe) != MPI_SUCCESS) return;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    char group[kMaxText] = {};
    if (MPI_Recv(group, kMaxText - 1, MPI_CHAR, probe.MPI_SOURCE, kAskTag, comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
    const Watchdog::Position p = watchdog_->position_in(group);
    const int64_t answer[3] = {static_cast<int64_t>(p.state), static_cast<int64_t>(p.kind), static_cast<int64_t>(p.seq)};
    MPI_Send(answer, 3, MPI_INT64_T, probe.MPI_SOURCE, kAnswerTag, comm_);
  }
}

std::string StatusService::diagnose(const GroupInfo& group, OpKind kind, uint64_t seq, int peer) {
  // A send or receive waits for one peer; a collective for every other member.
  std::vector<int> asked;
  if (is_collective(kind)) {
    for (int r : group.ranks) {
      if (r != rank_) asked.push_back(r);
    }
  } else if (peer >= 0 && peer < static_cast<int>(group.ranks.size())) {
    asked.push_back(group.ranks[static_cast<size_t>(peer)]);
  }
  const size_t n = asked.size();
  std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL), receives(n, MPI_REQUEST_NULL);
  std::vector<std::array<int64_t, 3>> answers(n);
  for (size_t i = 0; i < n; ++i) {
    MPI_Isend(group.name.c_str(), static_cast<int>(group.name.size()) + 1, MPI_CHAR, asked[i], kAskTag, comm_, &sends[i]);
    MPI_Irecv(answers[i].data(), 3, MPI_INT64_T, asked[i], kAnswerTag, comm_, &receives[i]);
  }
  std::vector<bool> answered(n, false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kAnswerSeconds);
  size_t pending = n;
  while (pending > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < n; ++i) {
      if (answered[i]) continue;
      int done = 0;
      MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        answered[i] = true;
        --pending;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Members at the late collective wait like this rank; the others are the story.
  using State = Watchdog::Position::State;
  std::string story;
  for (size_t i = 0; i < n; ++i) {
    const auto state = static_cast<State>(answers[i][0]);
    const auto their_kind = static_cast<OpKind>(answers[i][1]);
    const auto their_seq = static_cast<uint64_t>(answers[i][2]);
    std::string part;
    if (!answered[i]) {
      part = fmt::format("rank {} does not answer (stopped, or gone)", asked[i]);
    } else if (!is_collective(kind)) {
      part = fmt::format("rank {} is alive", asked[i]);
    } else if (state == State::None) {
      part = fmt::format("rank {} has not reached it (no collective on {} yet)", asked[i], group.name);
    } else if (their_seq < seq) {
      part = fmt::format("rank {} has not reached it (its last collective on {}: {} #{}{})", asked[i], group.name,
                         op_name(their_kind), their_seq, state == State::Done ? ", done" : ", in progress");
    } else if (their_seq > seq) {
      part = fmt::format("rank {} is past it, at {} #{}", asked[i], op_name(their_kind), their_seq);
    } else {
      continue;  // at this collective (waiting too, or done with its part)
    }
    story += story.empty() ? part : "; " + part;
  }
  // Requests left open are abandoned: the job is being ended.
  return story;
}

}  // namespace tessera::dist
