#pragma once
// Weights far from a model's initial ones, for tests whose outputs must depend on the context
// (initial weights give nearly uniform next-token distributions): every norm gain near 1, every
// other element N(0, scale²), by element index and parameter name, so any layout gets the same.
#include <string>

#include "core/rng.h"
#include "nn/parameters.h"

namespace tessera::testing {

inline void randomize_weights(nn::ParameterStore& store, uint64_t seed, double scale) {
  for (const auto& p : store.all()) {
    float* v = store.value(p).data<float>();
    const bool gain = p.name.find("norm") != std::string::npos && p.name.ends_with(".weight");
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double z = normal(seed, stream_id(p.name.c_str()), static_cast<uint64_t>(i));
      v[i] = static_cast<float>(gain ? 1.0 + 0.1 * z : scale * z);
    }
  }
}

}  // namespace tessera::testing
