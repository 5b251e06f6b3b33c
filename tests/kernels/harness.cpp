#include "harness.h"

#include <cmath>

#include "core/rng.h"

namespace tessera::kernels::testing {

std::vector<double> random_normal(size_t n, uint64_t seed, const std::string& stream, double mean, double stddev) {
  const uint64_t id = stream_id(stream.c_str());
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = mean + stddev * static_cast<double>(normal(seed, id, i));
  return v;
}

std::vector<int32_t> random_ints(size_t n, uint64_t seed, const std::string& stream, int32_t lo, int32_t hi) {
  const uint64_t id = stream_id(stream.c_str());
  std::vector<int32_t> v(n);
  const double span = static_cast<double>(hi) - static_cast<double>(lo);
  for (size_t i = 0; i < n; ++i) {
    v[i] = lo + static_cast<int32_t>(std::floor(static_cast<double>(uniform(seed, id, i)) * span));
  }
  return v;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

std::vector<std::shared_ptr<const OpCase>> all_cases() {
  auto cases = dense_cases();
  for (auto& c : attention_cases()) cases.push_back(std::move(c));
  for (auto& c : moe_cases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace tessera::kernels::testing
