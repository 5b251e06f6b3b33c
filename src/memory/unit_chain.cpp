#include "memory/unit_chain.h"

#include "core/check.h"

namespace tessera::memory {

std::vector<ChainUnit> chain_of_units(std::span<const config::UnitActivationBytes> bytes, std::span<const int> units,
                                      bool selective, std::span<const double> forward_time,
                                      std::span<const double> backward_time, std::span<const double> rebuild_time,
                                      bool sent_on) {
  std::vector<ChainUnit> chain;
  for (const int u : units) {
    TS_CHECK(u >= 1 && static_cast<size_t>(u) < bytes.size() && static_cast<size_t>(u) < forward_time.size() &&
                 static_cast<size_t>(u) < backward_time.size() && static_cast<size_t>(u) < rebuild_time.size(),
             "recompute chain: unit {} of a model of {} units (the embedding, unit 0, is never in a chain)", u,
             bytes.size());
    const config::UnitActivationBytes& b = bytes[static_cast<size_t>(u)];
    ChainUnit c;
    c.input_bytes = bytes[static_cast<size_t>(u) - 1].output;
    c.own_bytes = b.own - (selective ? b.recomputable : 0);
    c.backward_extra_bytes = selective ? b.rebuild_peak : 0;
    c.forward_extra_bytes = b.forward_transient + (selective ? b.selective_forward : 0);
    c.output_bytes = b.output;
    c.forward_time = forward_time[static_cast<size_t>(u)];
    c.backward_time = backward_time[static_cast<size_t>(u)];
    if (!selective) {
      c.rebuildable_bytes = b.recomputable;
      c.rebuild_bytes = b.rebuild_peak;
      c.selective_forward_extra_bytes = b.selective_forward;
      c.rebuild_time = b.recomputable > 0 ? rebuild_time[static_cast<size_t>(u)] : 0.0;
    }
    chain.push_back(c);
  }
  if (sent_on) {
    if (!chain.empty()) {
      ChainUnit& last = chain.back();
      last.forward_extra_bytes += last.output_bytes;
      last.output_bytes = 0;
    }
    chain.push_back(ChainUnit{});
  }
  return chain;
}

}  // namespace tessera::memory
