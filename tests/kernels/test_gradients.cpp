// Every op of the registry, checked the same way (see harness.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "harness.h"

namespace tessera::kernels::testing {
namespace {

constexpr uint64_t kSeed = 20240611;

struct Problem {
  Buffers<double> inputs;
  std::vector<double> upstream;  // dL/dout
};

Problem make_problem(const OpCase& op) {
  Problem p;
  for (const Input& in : op.inputs()) {
    p.inputs.push_back(random_normal(in.size, kSeed, op.name() + ":" + in.name, in.mean, in.stddev));
  }
  p.upstream = random_normal(op.output_size(), kSeed, op.name() + ":upstream");
  if (op.scalar_upstream()) std::fill(p.upstream.begin(), p.upstream.end(), 0.5 + std::fabs(p.upstream[0]));
  return p;
}

// L = Σ out · upstream, the scalar whose gradient the backward computes.
double objective(const OpCase& op, const Buffers<double>& inputs, const std::vector<double>& upstream) {
  std::vector<double> out(op.output_size());
  Buffers<double> saved;
  op.forward(inputs, out, saved);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * upstream[i];
  return l;
}

// Runs forward and backward; returns the gradient of every input. Activation gradients start as
// NaN (a kernel that accumulates into them poisons the result); parameter gradients start at a
// random prior value that is subtracted afterwards (a kernel that overwrites them loses it).
template <class T>
Buffers<double> gradients(const OpCase& op, const Problem& p, std::vector<double>* out_double = nullptr) {
  Buffers<T> in;
  for (const auto& v : p.inputs) in.push_back(cast<T>(v));
  std::vector<T> out(op.output_size());
  Buffers<T> saved;
  op.forward(in, out, saved);
  const std::vector<T> upstream = cast<T>(p.upstream);
  const std::vector<Input> specs = op.inputs();
  Buffers<T> din;
  Buffers<T> prior;
  for (size_t k = 0; k < specs.size(); ++k) {
    if (specs[k].grad == Grad::Written) {
      din.emplace_back(specs[k].size, std::numeric_limits<T>::quiet_NaN());
      prior.emplace_back(specs[k].size, T(0));
    } else {
      prior.push_back(cast<T>(random_normal(specs[k].size, kSeed, op.name() + ":prior:" + specs[k].name)));
      din.push_back(prior.back());
    }
  }
  op.backward(in, out, upstream, saved, din);
  Buffers<double> grads;
  for (size_t k = 0; k < din.size(); ++k) {
    std::vector<double> g(din[k].size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<double>(din[k][i]) - static_cast<double>(prior[k][i]);
    grads.push_back(std::move(g));
  }
  if (out_double != nullptr) *out_double = cast<double>(out);
  return grads;
}

class OpTest : public ::testing::TestWithParam<std::shared_ptr<const OpCase>> {};

TEST_P(OpTest, BackwardMatchesFiniteDifferences) {
  const OpCase& op = *GetParam();
  const Problem p = make_problem(op);
  const Buffers<double> grads = gradients<double>(op, p);
  const std::vector<Input> specs = op.inputs();
  constexpr double kStep = 1e-5;
  constexpr double kTolerance = 1e-6;

  // Element-wise, on the first, the last and a spread of entries of every input.
  for (size_t k = 0; k < specs.size(); ++k) {
    double scale = 0;
    for (double g : grads[k]) scale = std::max(scale, std::fabs(g));
    ASSERT_TRUE(std::isfinite(scale)) << specs[k].name << ": gradient not finite (accumulated into a written buffer?)";
    const size_t n = specs[k].size;
    std::vector<size_t> entries{n - 1};
    // Fewer entries of the large inputs: their cases exist to run the threaded paths, which the
    // directional derivatives below cover as a whole.
    const size_t samples = n > 4096 ? 8 : 23;
    for (size_t i = 0; i < n; i += std::max<size_t>(1, n / samples)) entries.push_back(i);
    std::sort(entries.begin(), entries.end());
    entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
    for (size_t i : entries) {
      Buffers<double> x = p.inputs;
      x[k][i] = p.inputs[k][i] + kStep;
      const double up = objective(op, x, p.upstream);
      x[k][i] = p.inputs[k][i] - kStep;
      const double down = objective(op, x, p.upstream);
      const double numeric = (up - down) / (2 * kStep);
      const double analytic = grads[k][i];
      // Relative to the entry, but no finer than 1% of the largest entry of this gradient:
      // entries near zero are judged on the gradient's own scale.
      const double denom = std::max({std::fabs(numeric), std::fabs(analytic), 1e-2 * scale, 1e-12});
      EXPECT_LT(std::fabs(numeric - analytic) / denom, kTolerance)
          << specs[k].name << "[" << i << "]: analytic " << analytic << " numeric " << numeric;
    }
  }

  // Directional derivatives along random directions through all inputs at once.
  for (int dir = 0; dir < 3; ++dir) {
    Buffers<double> v;
    double predicted = 0;
    for (size_t k = 0; k < specs.size(); ++k) {
      v.push_back(random_normal(specs[k].size, kSeed + dir, op.name() + ":direction:" + specs[k].name));
      for (size_t i = 0; i < v[k].size(); ++i) predicted += grads[k][i] * v[k][i];
    }
    Buffers<double> x = p.inputs;
    for (size_t k = 0; k < specs.size(); ++k)
      for (size_t i = 0; i < x[k].size(); ++i) x[k][i] = p.inputs[k][i] + kStep * v[k][i];
    const double up = objective(op, x, p.upstream);
    for (size_t k = 0; k < specs.size(); ++k)
      for (size_t i = 0; i < x[k].size(); ++i) x[k][i] = p.inputs[k][i] - kStep * v[k][i];
    const double down = objective(op, x, p.upstream);
    const double numeric = (up - down) / (2 * kStep);
    const double denom = std::max({std::fabs(numeric), std::fabs(predicted), 1e-12});
    EXPECT_LT(std::fabs(numeric - predicted) / denom, kTolerance)
        << "direction " << dir << ": analytic " << predicted << " numeric " << numeric;
  }
}

TEST_P(OpTest, FloatMatchesDouble) {
  const OpCase& op = *GetParam();
  const Problem p = make_problem(op);
  std::vector<double> out_d, out_f;
  const Buffers<double> grads_d = gradients<double>(op, p, &out_d);
  const Buffers<double> grads_f = gradients<float>(op, p, &out_f);
  // Float rounding (6e-8) grown by sums over at most a few hundred terms.
  constexpr double kTolerance = 1e-5;
  EXPECT_LT(relative_error(out_f, out_d), kTolerance) << "forward output";
  const std::vector<Input> specs = op.inputs();
  for (size_t k = 0; k < specs.size(); ++k) {
    EXPECT_LT(relative_error(grads_f[k], grads_d[k]), kTolerance) << "gradient of " << specs[k].name;
  }
}

// Every kernel splits its work so that each output is computed by the same operations in the
// same order whatever the number of threads: training is reproducible bit for bit across machines.
TEST_P(OpTest, SameBitsForAnyThreadCount) {
  const OpCase& op = *GetParam();
  const Problem p = make_problem(op);
  const int threads = omp_get_max_threads();
  std::vector<Buffers<double>> grads;
  std::vector<std::vector<double>> outs;
  for (int n : {1, 2, 3}) {
    omp_set_num_threads(n);
    outs.emplace_back();
    grads.push_back(gradients<float>(op, p, &outs.back()));
  }
  omp_set_num_threads(threads);
  for (size_t run = 1; run < outs.size(); ++run) {
    EXPECT_EQ(outs[run], outs[0]) << "forward output, run " << run;
    EXPECT_EQ(grads[run], grads[0]) << "gradients, run " << run;
  }
}

TEST_P(OpTest, ForwardMatchesReference) {
  const OpCase& op = *GetParam();
  if (!op.has_reference()) GTEST_SKIP() << "no independent forward for this op";
  const Problem p = make_problem(op);
  std::vector<double> out(op.output_size()), expected(op.output_size());
  Buffers<double> saved;
  op.forward(p.inputs, out, saved);
  op.reference(p.inputs, expected);
  EXPECT_LT(relative_error(out, expected), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Kernels, OpTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<std::shared_ptr<const OpCase>>& case_info) {
                           return case_info.param->name();
                         });

}  // namespace
}  // namespace tessera::kernels::testing
