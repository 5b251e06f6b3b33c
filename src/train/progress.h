#pragma once
// Progress of a training run: a one-line bar redrawn in place when stdout is a terminal (step,
// loss, learning rate, gradient norm, tokens/s, MFU, memory, ETA), plain log lines otherwise, so
// logs captured to a file stay readable. Under `tessera launch` every rank's stdout is a pseudo
// terminal whatever mpirun's own output is, so the launcher says whether that is a terminal
// (TESSERA_TERMINAL=1 or 0) and "auto" believes it.
//
// The bar fits the terminal: its width is read at every redraw (a resized window is followed), and
// where the line would not fit, the least important fields go first (gradient norm, learning rate,
// memory, then a shorter bar, MFU, tokens/s, the bar, ETA); step and loss always stay. A line that
// wraps would leave a new line at every redraw.
//
// Tokens/s and MFU are averages over the interval since the last line (or, for the bar, since the
// last plain line would have been), not the last step alone; an MFU above 100% is never shown
// (it would mean the peak is wrong, see peak_flops.h).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace tessera::train {

struct StepReport {
  int64_t step = 0;  // 1-based count of completed steps
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;     // processed in this step, all ranks
  double seconds = 0;     // the step's wall time
  size_t peak_bytes = 0;  // counted memory at its highest during the step, every tag together
  std::optional<size_t> nvme_bytes;  // the nvme tier at its highest during the step (when offloading)
};

// Whether stdout shows to a person: TESSERA_TERMINAL when the launcher set it, else isatty.
bool stdout_is_terminal();

// The width of the terminal stdout shows in: the terminal's own, else COLUMNS (the launcher passes
// its terminal's to the ranks, whose pseudo terminals have none), else 80.
int terminal_columns();

// The bar's line for a terminal `columns` wide, at most columns - 1 characters (the last column
// would wrap on some terminals): `fraction` of the bar filled, then the fields.
struct ProgressFields {
  std::string step, loss, lr, grad_norm, rate, mfu, memory, eta;
  std::string nvme = {};  // empty: nothing offloaded
};
std::string fit_bar_line(double fraction, const ProgressFields& fields, int columns);

class Progress {
 public:
  // mode: "auto" (bar when stdout is a terminal), "bar" or "plain". MFU per rank: tokens/s ÷ ranks
  // × flops_per_token ÷ peak_flops (the peak of one process).
  Progress(int64_t first_step, int64_t total_steps, int log_every, const std::string& mode, double flops_per_token,
           double peak_flops, int ranks);
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
  double flops_per_token_, peak_flops_;
  int ranks_;
  int64_t interval_tokens_ = 0;
  double interval_seconds_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::train
