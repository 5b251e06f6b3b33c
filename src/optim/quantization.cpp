#include "optim/quantization.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tessera::optim {

std::vector<float> codebook(Quantization kind, bool is_signed) {
  std::vector<double> values;
  if (kind == Quantization::Linear) {
    if (is_signed) {
      for (int k = 0; k <= 254; ++k) values.push_back(k / 127.0 - 1.0);
    } else {
      for (int k = 0; k <= 255; ++k) values.push_back(k / 255.0);
    }
  } else {
    const int fraction_bits_at_top = is_signed ? 6 : 7;
    for (int e = 0; e <= 6; ++e) {
      const int steps = 1 << (fraction_bits_at_top - e);
      for (int j = 0; j < steps; ++j) {
        const double magnitude = std::pow(10.0, -e) * (0.1 + 0.9 * (j + 0.5) / steps);
        values.push_back(magnitude);
        if (is_signed) values.push_back(-magnitude);
      }
    }
    values.push_back(0.0);
    values.push_back(1.0);
  }
  std::sort(values.begin(), values.end());
  TS_CHECK(values.size() <= 256, "an 8-bit codebook holds {} values", values.size());
  return {values.begin(), values.end()};
}

uint8_t nearest_code(std::span<const float> codebook, float x) {
  const auto above = std::lower_bound(codebook.begin(), codebook.end(), x);
  if (above == codebook.begin()) return 0;
  if (above == codebook.end()) return static_cast<uint8_t>(codebook.size() - 1);
  const auto below = above - 1;
  return static_cast<uint8_t>((x - *below <= *above - x ? below : above) - codebook.begin());
}

}  // namespace tessera::optim
