#include "optim/make_optimizer.h"

#include "optim/adafactor.h"
#include "optim/adam8bit.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/one_bit_adam.h"
#include "optim/sgd.h"

namespace tessera::optim {

std::unique_ptr<Optimizer> make_optimizer(MemoryAccountant& memory, const OptimizerConfig& config,
                                          const nn::ParameterStore& store, std::span<const Segment> layout,
                                          const ShardReduction* reduction, const ExchangeGroups* exchange) {
  switch (config.kind) {
    case OptimizerKind::AdamW:
      return std::make_unique<AdamW>(memory, AdamWConfig{config.beta1, config.beta2, config.eps, config.weight_decay,
                                                         config.variance_freeze_step},
                                     total_elements(layout));
    case OptimizerKind::Sgd: return std::make_unique<Sgd>(memory, config, layout);
    case OptimizerKind::Adafactor: return std::make_unique<Adafactor>(memory, config, store, layout, reduction);
    case OptimizerKind::Adam8bit: return std::make_unique<Adam8bit>(memory, config, store, layout, reduction);
    case OptimizerKind::Lamb: return std::make_unique<Lamb>(memory, config, store, layout, reduction);
    case OptimizerKind::Lars: return std::make_unique<Lars>(memory, config, store, layout, reduction);
    case OptimizerKind::OneBitAdam: {
      TS_CHECK(exchange != nullptr && !exchange->groups.empty(),
               "optimizer 'onebit_adam' averages its own momentum over the data-parallel group: make_optimizer needs "
               "the groups to exchange it over (ExchangeGroups)");
      std::vector<int> group_of = exchange->group_of;
      if (group_of.empty()) group_of.assign(layout.size(), 0);
      return std::make_unique<OneBitAdam>(memory, config, layout, exchange->groups, std::move(group_of));
    }
  }
  TS_FAIL("unknown optimizer kind {}", static_cast<int>(config.kind));
}

int64_t state_bytes(const OptimizerConfig& config, std::span<const Segment> layout) {
  const int64_t elements = total_elements(layout);
  switch (config.kind) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Lamb: return 8 * elements;
    case OptimizerKind::OneBitAdam: return 12 * elements;  // m, v and the momentum's compression error
    case OptimizerKind::Sgd:
    case OptimizerKind::Lars: return config.momentum > 0.0f ? 4 * elements : 0;
    case OptimizerKind::Adafactor: {
      int64_t bytes = config.first_moment ? 4 * elements : 0;
      for (const Segment& s : layout) {
        const Adafactor::Factors f = Adafactor::factors_of(*s.param);
        bytes += f.factored() ? 4 * f.state_floats() : 4 * s.size();
      }
      return bytes;
    }
    case OptimizerKind::Adam8bit: {
      int64_t bytes = 0;
      for (const Segment& s : layout) {
        bytes += Adam8bit::quantized(*s.param)
                     ? 2 * s.size() + 8 * Adam8bit::blocks_touched(s.begin, s.end, config.block_size)
                     : 8 * s.size();
      }
      return bytes;
    }
  }
  TS_FAIL("unknown optimizer kind {}", static_cast<int>(config.kind));
}

double state_bytes_per_parameter(const OptimizerConfig& config) {
  switch (config.kind) {
    case OptimizerKind::AdamW:
    case OptimizerKind::Lamb: return 8;
    case OptimizerKind::OneBitAdam: return 12;
    case OptimizerKind::Sgd:
    case OptimizerKind::Lars: return config.momentum > 0.0f ? 4 : 0;
    case OptimizerKind::Adafactor: return config.first_moment ? 4 : 0;
    case OptimizerKind::Adam8bit: return 2 + 8.0 / static_cast<double>(config.block_size);
  }
  TS_FAIL("unknown optimizer kind {}", static_cast<int>(config.kind));
}

}  // namespace tessera::optim
