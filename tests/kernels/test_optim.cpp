// AdamW against a scalar transcription of torch.optim.AdamW, and global-norm clipping.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <utility>

#include "core/check.h"
#include "harness.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/grad_norm.h"

namespace tessera::kernels::testing {
namespace {

struct Hyper {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
};

// torch.optim.AdamW (single-tensor path), one element, in double.
void adamw_reference(double& p, double g, double& m, double& v, const Hyper& h, int64_t step) {
  p *= 1.0 - h.lr * h.wd;
  m += (1.0 - h.beta1) * (g - m);
  v = v * h.beta2 + (1.0 - h.beta2) * g * g;
  const double bc1 = 1.0 - std::pow(h.beta1, double(step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(step));
  p -= (h.lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + h.eps);
}

template <class T>
void check_adamw(double tolerance) {
  const Hyper h;
  constexpr size_t n = 5000;  // past one element block, so the threaded path runs
  std::vector<double> p = random_normal(n, 2, "adamw:p"), m(n, 0.0), v(n, 0.0);
  std::vector<T> pt = cast<T>(p), mt(n, T(0)), vt(n, T(0));
  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<double> g = random_normal(n, 2 + step, "adamw:g", 0.0, 0.01 * double(step));
    const std::vector<T> gt = cast<T>(g);
    adamw_update(pt.data(), gt.data(), mt.data(), vt.data(), n, float(h.lr), float(h.beta1), float(h.beta2),
                 float(h.eps), float(h.wd), step);
    // The kernel receives float hyperparameters: feed the reference the same rounded values.
    const Hyper hf{float(h.lr), float(h.beta1), float(h.beta2), float(h.eps), float(h.wd)};
    for (size_t i = 0; i < n; ++i) adamw_reference(p[i], g[i], m[i], v[i], hf, step);
  }
  EXPECT_LT(relative_error(cast<double>(pt), p), tolerance);
  EXPECT_LT(relative_error(cast<double>(mt), m), tolerance);
  EXPECT_LT(relative_error(cast<double>(vt), v), tolerance);
}

TEST(KernelAdamW, MatchesPyTorchFormulaInDouble) { check_adamw<double>(1e-13); }
TEST(KernelAdamW, MatchesPyTorchFormulaInFloat) { check_adamw<float>(1e-6); }

TEST(KernelAdamW, FirstStepMovesEachParameterByLearningRate) {
  // At step 1, mhat = g and vhat = g^2: the update is lr * sign(g) (eps and decay aside).
  std::vector<double> p{1.0, -2.0, 0.5}, g{0.3, -4.0, 1e-3}, m(3, 0.0), v(3, 0.0);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 3, 0.01f, 0.9f, 0.999f, 0.0f, 0.0f, 1);
  EXPECT_NEAR(p[0], 1.0 - 0.01, 1e-9);
  EXPECT_NEAR(p[1], -2.0 + 0.01, 1e-9);
  EXPECT_NEAR(p[2], 0.5 - 0.01, 1e-9);
}

TEST(KernelAdamW, StepCountsFromOne) {
  std::vector<float> p(2), g(2), m(2), v(2);
  try {
    adamw_update(p.data(), g.data(), m.data(), v.data(), 2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step = 0 must count from 1"), std::string::npos) << e.what();
  }
}

TEST(KernelGradNorm, SumOfSquaresIsExactAndIndependentOfThreads) {
  const std::vector<float> x = cast<float>(random_normal(300001, 6, "norm:x"));
  double expected = 0;
  for (float f : x) expected += double(f) * double(f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_of_squares(x.data(), x.size());
  omp_set_num_threads(3);
  const double three = sum_of_squares(x.data(), x.size());
  omp_set_num_threads(threads);
  EXPECT_NEAR(one, expected, 1e-12 * expected);
  EXPECT_EQ(one, three);
  EXPECT_EQ(sum_of_squares(x.data(), 0), 0.0);
}

// A gradient written to the nvme tier a piece at a time has its squares summed chunk by chunk
// where each chunk lies, copied to another address where it straddles pieces.
TEST(KernelGradNorm, ChunksSummedApartAndAddedInOrderGiveTheWholeSumsBits) {
  for (size_t n : {size_t{0}, size_t{5}, size_t{63}, size_t{64}, size_t{1000}, size_t{300001}}) {
    const std::vector<float> x = cast<float>(random_normal(static_cast<int64_t>(n), 7, "norm:chunks"));
    const size_t chunk = square_chunk_elements(n);
    double total = 0;
    for (size_t k = 0; k < kSquareChunks; ++k) {
      const size_t lo = std::min(n, k * chunk), hi = std::min(n, lo + chunk);
      std::vector<float> elsewhere(hi - lo + 3);  // at another alignment than in x
      std::copy(x.begin() + static_cast<std::ptrdiff_t>(lo), x.begin() + static_cast<std::ptrdiff_t>(hi),
                elsewhere.begin() + 3);
      total += sum_of_squares_chunk(elsewhere.data() + 3, hi - lo);
    }
    EXPECT_EQ(total, sum_of_squares(x.data(), n)) << n << " elements";
  }
}

TEST(KernelGradNorm, ClipsToTheMaximumNorm) {
  std::vector<float> a{3.0f, 0.0f}, b(40000, 0.0f);
  b[123] = 4.0f;  // total norm 5
  std::vector<std::pair<float*, size_t>> buffers{{a.data(), a.size()}, {b.data(), b.size()}};
  const double norm = clip_grad_norm(buffers, 1.0);
  EXPECT_NEAR(norm, 5.0, 1e-12);
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_FLOAT_EQ(a[0], float(3.0 * coef));
  EXPECT_FLOAT_EQ(b[123], float(4.0 * coef));
  EXPECT_NEAR(std::sqrt(sum_of_squares(a.data(), 2) + sum_of_squares(b.data(), b.size())), 1.0, 1e-6);
}

TEST(KernelGradNorm, LeavesSmallOrUnclippedGradientsAlone) {
  std::vector<double> a{0.6, 0.8};
  std::vector<std::pair<double*, size_t>> buffers{{a.data(), a.size()}};
  EXPECT_NEAR(clip_grad_norm(buffers, 2.0), 1.0, 1e-15);  // below the maximum
  EXPECT_NEAR(clip_grad_norm(buffers, 0.0), 1.0, 1e-15);  // clipping off
  EXPECT_EQ(a[0], 0.6);
  EXPECT_EQ(a[1], 0.8);
}

TEST(KernelGradNorm, NonFiniteNormIsReportedNotSpread) {
  std::vector<float> a{1.0f, std::nanf(""), 2.0f};
  std::vector<std::pair<float*, size_t>> buffers{{a.data(), a.size()}};
  EXPECT_TRUE(std::isnan(clip_grad_norm(buffers, 1.0)));
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[2], 2.0f);
}

}  // namespace
}  // namespace tessera::kernels::testing
