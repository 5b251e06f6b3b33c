#pragma once
// Progress of a training run: a one-line bar redrawn in place when stdout is a terminal (step,
// loss, learning rate, gradient norm, tokens/s, MFU, ETA), plain log lines otherwise, so logs
// captured to a file stay readable.
#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::train {

struct StepReport {
  int64_t step = 0;  // 1-based count of completed steps
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_second = 0;
  double mfu = 0;  // fraction of the measured matmul ceiling
  size_t peak_bytes = 0;  // counted memory at its highest during the step, every tag together
};

class Progress {
 public:
  // mode: "auto" (bar when stdout is a terminal), "bar" or "plain".
  Progress(int64_t first_step, int64_t total_steps, int log_every, const std::string& mode);
  void update(const StepReport& report);
  // A line printed above the bar (evaluations, samples, checkpoints).
  void message(const std::string& text);
  void finish();
  bool uses_bar() const { return bar_; }

 private:
  void clear_bar();
  std::string eta(int64_t step) const;

  int64_t first_step_, total_steps_;
  int log_every_;
  bool bar_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::train
