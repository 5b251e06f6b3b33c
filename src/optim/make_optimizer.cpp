#include "optim/make_optimizer.h"

#include <array>

#include <fmt/ranges.h>

#include "optim/adafactor.h"
#include "optim/adam8bit.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/sgd.h"

namespace tessera::optim {

std::unique_ptr<Optimizer> make_optimizer(MemoryAccountant& memory, const OptimizerConfig& config,
                                          const nn::ParameterStore& store, std::span<const Segment> layout,
                                          const ShardReduction* reduction) {
  const std::string& n = config.name;
  if (n == "adamw") {
    return std::make_unique<AdamW>(memory, AdamWConfig{config.beta1, config.beta2, config.eps, config.weight_decay,
                                                       config.variance_freeze_step},
                                   total_elements(layout));
  }
  if (n == "sgd") return std::make_unique<Sgd>(memory, config, layout);
  if (n == "adafactor") return std::make_unique<Adafactor>(memory, config, store, layout, reduction);
  if (n == "adam8bit") return std::make_unique<Adam8bit>(memory, config, store, layout, reduction);
  if (n == "lamb") return std::make_unique<Lamb>(memory, config, store, layout, reduction);
  if (n == "lars") return std::make_unique<Lars>(memory, config, store, layout, reduction);
  TS_CHECK(n != "onebit_adam", "optimizer 'onebit_adam' reduces its own momentum over the data-parallel group: the "
           "training engine builds it (parallel/compression/one_bit_adam.h)");
  TS_FAIL("optimizer '{}' is not known; use one of {}", n, fmt::join(kOptimizerNames, ", "));
}

int64_t state_bytes(const OptimizerConfig& config, std::span<const Segment> layout) {
  const std::string& n = config.name;
  const int64_t elements = total_elements(layout);
  if (n == "adamw" || n == "lamb") return 8 * elements;
  if (n == "onebit_adam") return 12 * elements;  // m, v and the momentum's compression error
  if (n == "sgd" || n == "lars") return config.momentum > 0.0f ? 4 * elements : 0;
  if (n == "adafactor") {
    int64_t bytes = config.first_moment ? 4 * elements : 0;
    for (const Segment& s : layout) {
      const Adafactor::Factors f = Adafactor::factors_of(*s.param);
      bytes += f.factored() ? 4 * f.state_floats() : 4 * s.size();
    }
    return bytes;
  }
  if (n == "adam8bit") {
    int64_t bytes = 0;
    for (const Segment& s : layout) {
      bytes += Adam8bit::quantized(*s.param)
                   ? 2 * s.size() + 8 * Adam8bit::blocks_touched(s.begin, s.end, config.block_size)
                   : 8 * s.size();
    }
    return bytes;
  }
  TS_FAIL("optimizer '{}' is not known; use one of {}", n, fmt::join(kOptimizerNames, ", "));
}

double state_bytes_per_parameter(const OptimizerConfig& config) {
  const std::string& n = config.name;
  if (n == "adamw" || n == "lamb") return 8;
  if (n == "onebit_adam") return 12;
  if (n == "sgd" || n == "lars") return config.momentum > 0.0f ? 4 : 0;
  if (n == "adafactor") return config.first_moment ? 4 : 0;
  if (n == "adam8bit") return 2 + 8.0 / static_cast<double>(config.block_size);
  TS_FAIL("optimizer '{}' is not known; use one of {}", n, fmt::join(kOptimizerNames, ", "));
}

}  // namespace tessera::optim
