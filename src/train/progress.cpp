#include "train/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "train/peak_flops.h"

namespace tessera::train {

namespace {
std::string duration(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}
std::string rate(double tokens_per_second) {
  return tokens_per_second >= 1e3 ? fmt::format("{:.1f}k", tokens_per_second / 1e3) : fmt::format("{:.0f}", tokens_per_second);
}
std::string bytes(size_t n) {
  const double b = static_cast<double>(n);
  if (b >= 1024.0 * 1048576.0) return fmt::format("{:.2f} GiB", b / (1024.0 * 1048576.0));
  return fmt::format("{:.1f} MiB", b / 1048576.0);
}
}  // namespace

bool stdout_is_terminal() {
  if (const char* said = std::getenv("TESSERA_TERMINAL"); said != nullptr && *said != 0) {
    return std::strcmp(said, "1") == 0;
  }
  return ::isatty(STDOUT_FILENO) == 1;
}

int terminal_columns() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    const int n = std::atoi(columns);
    if (n > 0) return n;
  }
  return 80;
}

std::string fit_bar_line(double fraction, const ProgressFields& f, int columns) {
  const auto bar = [&](int width) {
    const auto filled = static_cast<int>(static_cast<double>(width) * std::clamp(fraction, 0.0, 1.0));
    std::string text(static_cast<size_t>(filled), '#');
    text.resize(static_cast<size_t>(width), '.');
    return "[" + text + "] ";
  };
  // From the fullest line to the barest, each dropping the next least important part.
  struct Shape {
    int bar;  // 0: none
    bool grad_norm, lr, memory, mfu, rate, eta;
  };
  const Shape shapes[] = {
      {24, true, true, true, true, true, true},    {24, false, true, true, true, true, true},
      {24, false, false, true, true, true, true},  {24, false, false, false, true, true, true},
      {10, false, false, false, true, true, true}, {10, false, false, false, false, true, true},
      {10, false, false, false, false, false, true}, {0, false, false, false, false, false, true},
      {0, false, false, false, false, false, false},
  };
  const size_t room = static_cast<size_t>(std::max(columns - 1, 1));
  std::string line;
  for (const Shape& shape : shapes) {
    std::vector<std::string> parts{f.step, f.loss};
    if (shape.lr) parts.push_back(f.lr);
    if (shape.grad_norm) parts.push_back(f.grad_norm);
    if (shape.rate) parts.push_back(f.rate);
    if (shape.mfu) parts.push_back(f.mfu);
    if (shape.memory) parts.push_back(f.memory);
    if (shape.memory && !f.nvme.empty()) parts.push_back(f.nvme);
    if (shape.eta) parts.push_back(f.eta);
    line = shape.bar > 0 ? bar(shape.bar) : std::string();
    for (size_t i = 0; i < parts.size(); ++i) line += (i > 0 ? " | " : "") + parts[i];
    if (line.size() <= room) return line;
  }
  return line.substr(0, room);  // a terminal narrower than step and loss
}

Progress::Progress(int64_t first_step, int64_t total_steps, int log_every, const std::string& mode,
                   double flops_per_token, double peak_flops, int ranks)
    : first_step_(first_step),
      total_steps_(total_steps),
      log_every_(log_every),
      bar_(mode == "bar" || (mode == "auto" && stdout_is_terminal())),
      flops_per_token_(flops_per_token),
      peak_flops_(peak_flops),
      ranks_(ranks),
      start_(std::chrono::steady_clock::now()) {}

std::string Progress::eta(int64_t step) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - first_step_;
  if (done <= 0) return "?";
  return duration(elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step));
}

void Progress::update(const StepReport& r) {
  interval_tokens_ += r.tokens;
  interval_seconds_ += r.seconds;
  const bool line_due = r.step % log_every_ == 0 || r.step == total_steps_ || r.step == first_step_ + 1;
  if (!bar_ && !line_due) return;
  const double tokens_per_second = interval_seconds_ > 0 ? static_cast<double>(interval_tokens_) / interval_seconds_ : 0;
  const double mfu = model_flops_utilization(tokens_per_second / ranks_ * flops_per_token_, peak_flops_);
  const std::string mfu_text = mfu >= 0 ? fmt::format("{:.1f}%", 100.0 * mfu) : std::string("n/a");
  ProgressFields fields{fmt::format("step {:>{}}/{}", r.step, std::to_string(total_steps_).size(), total_steps_),
                        fmt::format("loss {:.4f}", r.loss),
                        fmt::format("lr {:.2e}", r.lr),
                        fmt::format("gnorm {:.3f}", r.grad_norm),
                        fmt::format("{} tok/s", rate(tokens_per_second)),
                        fmt::format("MFU {}", mfu_text),
                        fmt::format("mem peak {}", bytes(r.peak_bytes)),
                        fmt::format("ETA {}", eta(r.step)),
                        r.nvme_bytes ? fmt::format("nvme {}", bytes(*r.nvme_bytes)) : std::string()};
  if (bar_) {
    const double fraction = static_cast<double>(r.step) / static_cast<double>(total_steps_);
    fmt::print("\r\033[K{}", fit_bar_line(fraction, fields, terminal_columns()));
    std::fflush(stdout);
    bar_drawn_ = true;
  } else {
    fmt::print("{} | {} | {} | {} | {} | {} | {}{} | {}\n", fields.step, fields.loss, fields.lr, fields.grad_norm,
               fields.rate, fields.mfu, fields.memory, fields.nvme.empty() ? "" : " | " + fields.nvme, fields.eta);
    std::fflush(stdout);
  }
  if (line_due) {
    interval_tokens_ = 0;
    interval_seconds_ = 0;
  }
}

void Progress::clear_bar() {
  if (bar_ && bar_drawn_) {
    fmt::print("\r\033[K");
    bar_drawn_ = false;
  }
}

void Progress::message(const std::string& text) {
  clear_bar();
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

void Progress::finish() {
  if (bar_ && bar_drawn_) fmt::print("\n");
  bar_drawn_ = false;
  std::fflush(stdout);
}

}  // namespace tessera::train
