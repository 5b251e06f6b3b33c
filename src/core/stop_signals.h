#pragma once
// SIGINT, SIGTERM, SIGHUP and SIGUSR1 as requests to stop at the next safe point (a step boundary,
// where a checkpoint can be written), received without a signal handler. SIGHUP is a closed
// terminal or a lost login session: its default action would end the run and lose every step
// since the last checkpoint. SIGUSR1 is what mpirun hands on
// to every rank without aborting the job (cli/launch_command.cpp), and what Slurm's
// `--signal=USR1@<seconds>` sends before a job's time runs out.
//
// No handler may run on a thread that computes: a handler pushed onto the stack of a thread inside
// oneDNN's JIT sgemm corrupts the heap (reproduced with dnnl_sgemm alone under a stream of signals;
// an alternate signal stack avoids it, but libgomp's worker threads cannot be given one). So the
// signals are blocked before any other thread starts — every thread inherits the mask — and a
// thread of their own takes them with sigtimedwait and only records them.
//
// One stop, however many deliveries: a terminal's Ctrl-C reaches every process of its foreground
// group (mpirun and each rank, and mpirun forwards it again), Slurm signals every process of a
// step, `timeout` signals the child and then its group. Repeats are one request; only a signal
// that comes while the stop's checkpoint has been saving for longer than the grace period ends
// the process at once (by that signal, the usual way).
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace tessera {

class StopSignals {
 public:
  struct Options {
    // Signals within this long of the first are the same request, said nothing of.
    double repeat_seconds = 3.0;
    // A signal while a save has run this long ends the process.
    double save_grace_seconds = 10.0;
    // Whether to say on stderr what a signal did (one process of a job says it for all).
    bool announce = true;
  };

  // Blocks the signals in the calling thread, and so in every thread started after it:
  // construct it before anything starts a thread (OpenMP's pool, MPI). At most one at a time.
  explicit StopSignals(Options options);
  StopSignals() : StopSignals(Options{}) {}
  // Stops the receiving thread and unblocks the signals in the calling thread: SIGINT, SIGTERM or SIGHUP
  // after this ends the process as if none had been received; SIGUSR1, a stop request and nothing
  // else, is ignored from then on (the run it would stop is over).
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received, or 0.
  int requested() const { return first_.load(std::memory_order_acquire); }

  // While it lives, a checkpoint is being written: the grace period runs from its start.
  class Saving {
   public:
    explicit Saving(StopSignals* signals);
    ~Saving();
    Saving(const Saving&) = delete;
    Saving& operator=(const Saving&) = delete;

   private:
    StopSignals* signals_;
  };

 private:
  void receive();
  void on_signal(int signal_number);
  void say(const std::string& text) const;

  Options options_;
  std::atomic<int> first_{0};
  std::atomic<int64_t> first_at_ns_{0};
  std::atomic<int64_t> saving_since_ns_{0};  // 0: not saving
  bool said_already_stopping_ = false;      // the receiving thread's own
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace tessera
