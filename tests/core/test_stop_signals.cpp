// Stop signals taken by a thread of their own: the first is the request, repeats within the
// window are the same request, and only a signal while a save has outlasted the grace period ends
// the process. Each case runs in a child process, since it blocks and sends real signals.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <thread>

#include "core/stop_signals.h"

namespace {

using namespace std::chrono_literals;
using tessera::StopSignals;

const StopSignals::Options kQuick{.repeat_seconds = 0.5, .save_grace_seconds = 0.3, .announce = false};

// Runs `body` in a child process; returns its wait status.
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

bool wait_requested(const StopSignals& s, int signal_number) {
  for (int i = 0; i < 200 && s.requested() != signal_number; ++i) std::this_thread::sleep_for(10ms);
  return s.requested() == signal_number;
}

TEST(StopSignals, TheFirstSignalIsTheRequestAndTheProcessGoesOn) {
  const int status = in_child([] {
    StopSignals stop(kQuick);
    if (stop.requested() != 0) return 1;
    ::kill(::getpid(), SIGTERM);
    if (!wait_requested(stop, SIGTERM)) return 2;
    ::kill(::getpid(), SIGINT);  // a repeat: still the first signal's request
    std::this_thread::sleep_for(100ms);
    return stop.requested() == SIGTERM ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A closed terminal (SIGHUP) is a stop request like the others, not the end of the run.
TEST(StopSignals, AHangupIsAStopRequest) {
  const int status = in_child([] {
    StopSignals stop(kQuick);
    ::kill(::getpid(), SIGHUP);
    return wait_requested(stop, SIGHUP) ? 0 : 2;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignals, SignalsBeforeOrEarlyInASaveDoNotEndTheProcess) {
  const int status = in_child([] {
    StopSignals stop(kQuick);
    ::kill(::getpid(), SIGUSR1);
    if (!wait_requested(stop, SIGUSR1)) return 2;
    std::this_thread::sleep_for(600ms);  // past the repeat window, but not saving
    ::kill(::getpid(), SIGINT);
    std::this_thread::sleep_for(100ms);
    const StopSignals::Saving saving(&stop);
    ::kill(::getpid(), SIGINT);  // saving, within the grace period
    std::this_thread::sleep_for(100ms);
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignals, ASignalWhileASaveOutlastsTheGracePeriodEndsTheProcessByIt) {
  const int status = in_child([] {
    StopSignals stop(kQuick);
    ::kill(::getpid(), SIGTERM);
    if (!wait_requested(stop, SIGTERM)) return 2;
    const StopSignals::Saving saving(&stop);
    std::this_thread::sleep_for(400ms);
    ::kill(::getpid(), SIGINT);
    std::this_thread::sleep_for(2s);
    return 4;  // not reached
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(StopSignals, AfterItIsGoneASignalEndsTheProcessAsUsual) {
  const int status = in_child([] {
    { StopSignals stop(kQuick); }
    ::kill(::getpid(), SIGTERM);
    std::this_thread::sleep_for(2s);
    return 4;
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

// mpirun forwards a stop to ranks that may already have finished: a late SIGUSR1 must not turn a
// finished run into a failed job.
TEST(StopSignals, AfterItIsGoneAStopRequestByUsr1IsIgnored) {
  const int status = in_child([] {
    { StopSignals stop(kQuick); }
    ::kill(::getpid(), SIGUSR1);
    std::this_thread::sleep_for(200ms);
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
