#include "dist/watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "dist/communicator.h"

namespace tessera::dist {

Watchdog::Watchdog(double timeout_seconds, int world_rank, int world_size, AbortAction abort)
    : timeout_(timeout_seconds), world_rank_(world_rank), world_size_(world_size), abort_(std::move(abort)) {
  TS_CHECK(timeout_seconds > 0, "watchdog timeout must be positive seconds, got {}", timeout_seconds);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

uint64_t Watchdog::begin(std::shared_ptr<const GroupInfo> group, OpKind kind, uint64_t seq, int peer,
                         std::string label) {
  std::lock_guard lock(mutex_);
  const uint64_t token = next_token_++;
  if (is_collective(kind)) {
    Last& p = positions_[group->name];
    p.kind = kind;
    p.seq = seq;
    ++p.in_flight;
  }
  entries_.emplace(token, Entry{std::move(group), kind, seq, peer, std::move(label), std::chrono::steady_clock::now()});
  return token;
}

void Watchdog::end(uint64_t token) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  if (is_collective(it->second.kind)) --positions_[it->second.group->name].in_flight;
  entries_.erase(it);
}

void Watchdog::set_diagnosis(Diagnosis diagnosis) {
  std::lock_guard lock(mutex_);
  diagnosis_ = std::move(diagnosis);
}

Watchdog::Position Watchdog::position_in(const std::string& group) const {
  std::lock_guard lock(mutex_);
  auto it = positions_.find(group);
  if (it == positions_.end()) return {};
  const Last& p = it->second;
  return {p.in_flight > 0 ? Position::State::InProgress : Position::State::Done, p.kind, p.seq};
}

size_t Watchdog::in_flight() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::string Watchdog::message(const Entry& e) const {
  std::string op = fmt::format("{} #{}", op_name(e.kind), e.seq);
  if (e.kind == OpKind::Send) op += fmt::format(" to rank {}", e.peer);
  if (e.kind == OpKind::Recv) op += fmt::format(" from rank {}", e.peer);
  if (!e.label.empty()) op += fmt::format(" ({})", e.label);
  return fmt::format("tessera watchdog: rank {} of {}: {} on {} (group ranks {}) did not complete within {:.1f} s; "
                     "aborting the job",
                     world_rank_, world_size_, op, e.group->name, format_ranks(e.group->ranks), timeout_);
}

void Watchdog::run() {
  const auto timeout = std::chrono::duration<double>(timeout_);
  const auto period = std::chrono::duration<double>(std::clamp(timeout_ / 20.0, 0.005, 1.0));
  std::unique_lock lock(mutex_);
  while (!stop_) {
    stop_cv_.wait_for(lock, period, [&] { return stop_; });
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    // The oldest operation first: it is the one the others wait behind.
    Entry* late = nullptr;
    for (auto& [token, e] : entries_) {
      if (!e.reported && now - e.start > timeout && (late == nullptr || e.start < late->start)) late = &e;
    }
    if (late == nullptr) continue;
    late->reported = true;
    const Entry entry = *late;
    const Diagnosis diagnosis = diagnosis_;
    lock.unlock();
    std::string line = message(entry);
    if (diagnosis) {
      const std::string where = diagnosis(*entry.group, entry.kind, entry.seq, entry.peer);
      if (!where.empty()) line.insert(line.size() - std::string("; aborting the job").size(), "; " + where);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    abort_(line);
    lock.lock();
  }
}

}  // namespace tessera::dist
