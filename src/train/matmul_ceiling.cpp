#include "train/matmul_ceiling.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace tessera::train {

double measure_matmul_ceiling(double seconds) {
  const int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::matmul(c.data(), a.data(), b.data(), static_cast<const float*>(nullptr), n, n, n, kernels::Transpose::No,
                    kernels::Transpose::No, false);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) / dt);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  return best;
}

}  // namespace tessera::train
