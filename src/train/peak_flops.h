#pragma once
// The matmul peak that MFU divides by. A figure measured at every start-up varies with whatever
// else the machine is doing (0.25 s of matmul gave 21 to 141 GFLOP/s across runs of one machine)
// and made MFU meaningless, so the peak is fixed per machine: the configured log.peak_gflops if
// given (a datasheet or a cluster file's figure), else a calibration measured once per machine,
// thread count and float GEMM library — the best of many repeated matmuls over about a second — and stored
// (peak-flops.json in $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera).
// A machine that is busy when it is measured (load average above half a core) would store a
// figure far too low, so then the measurement serves this run only and the next run tries again.
// Delete the file to calibrate again.
#include <string>

namespace tessera::train {

struct MatmulPeak {
  double flops = 0;    // per second, of one process
  std::string source;  // where it came from, for the log
};

MatmulPeak matmul_peak(double configured_gflops, int threads);

// Model FLOP utilization, or a negative value when the figure would be impossible (above 1: the
// peak is wrong, so MFU says nothing).
double model_flops_utilization(double achieved_flops, double peak_flops);

}  // namespace tessera::train
