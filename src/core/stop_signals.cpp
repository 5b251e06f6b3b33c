#include "core/stop_signals.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>

#include "core/check.h"

namespace tessera {

namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  return set;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "SIGUSR1";
  }
}

// Ends the process by `signal_number` with its default action, as if it had never been caught.
[[noreturn]] void end_by(int signal_number) {
  std::signal(signal_number, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(signal_number);
  ::_exit(128 + signal_number);  // not reached: the default action of both signals ends the process
}

}  // namespace

StopSignals::StopSignals(Options options) : options_(options) {
  const sigset_t set = stop_set();
  const int error = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  TS_CHECK(error == 0, "cannot block the stop signals: {}", std::strerror(error));
  thread_ = std::thread([this] { receive(); });
}

StopSignals::~StopSignals() {
  quit_.store(true);
  thread_.join();
  // SIGUSR1 only ever asks a run to stop (mpirun's forwarding of a stop, Slurm's warning before the
  // time limit); one that comes now, or is still pending, is too late to stop anything, and its
  // default action would turn a finished run into a failed job. Ignored before the unblock, so a
  // pending one is discarded too.
  std::signal(SIGUSR1, SIG_IGN);
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void StopSignals::receive() {
  const sigset_t set = stop_set();
  const timespec poll{0, 100'000'000};
  while (!quit_.load()) {
    const int signal_number = ::sigtimedwait(&set, nullptr, &poll);
    if (signal_number > 0) on_signal(signal_number);
    // Otherwise EAGAIN (the poll passed, to look at quit_) or EINTR: wait again.
  }
}

void StopSignals::on_signal(int signal_number) {
  const int64_t now = now_ns();
  int expected = 0;
  if (first_.compare_exchange_strong(expected, signal_number, std::memory_order_acq_rel)) {
    first_at_ns_.store(now);
    say(fmt::format("{} received: stopping after this step with a checkpoint (exit code 3)",
                    signal_name(signal_number)));
    return;
  }
  const int64_t saving_since = saving_since_ns_.load();
  const double saving_for = saving_since != 0 ? static_cast<double>(now - saving_since) * 1e-9 : 0.0;
  if (saving_since != 0 && saving_for > options_.save_grace_seconds) {
    say(fmt::format("{} received while the checkpoint has been saving for {:.0f} s: ending now, without it",
                    signal_name(signal_number), saving_for));
    end_by(signal_number);
  }
  const double since_first = static_cast<double>(now - first_at_ns_.load()) * 1e-9;
  if (since_first <= options_.repeat_seconds || said_already_stopping_) return;
  said_already_stopping_ = true;
  say(fmt::format("{} received: already stopping after this step with a checkpoint; a signal while the checkpoint "
                  "has been saving for more than {:g} s ends the process at once (SIGKILL ends it now, losing the "
                  "steps since the last checkpoint)",
                  signal_name(signal_number), options_.save_grace_seconds));
}

void StopSignals::say(const std::string& text) const {
  if (!options_.announce) return;
  const std::string line = "\n" + text + "\n";
  // One write, so the line is not split by the progress output of the main thread.
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

StopSignals::Saving::Saving(StopSignals* signals) : signals_(signals) {
  if (signals_ != nullptr) signals_->saving_since_ns_.store(now_ns());
}

StopSignals::Saving::~Saving() {
  if (signals_ != nullptr) signals_->saving_since_ns_.store(0);
}

}  // namespace tessera
