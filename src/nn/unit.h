#pragma once
// The model as a chain of units — 0: embedding, 1..L: the blocks, L+1: final norm, head and loss.
// A unit is the grain at which execution is scheduled and transforms act: pipeline stages,
// checkpoint segments, ZeRO-3 gathers and gradient buckets are made of whole units.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::nn {

struct ParamRange {
  int64_t begin = 0;  // element offsets in the flat parameter/gradient buffers
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const ParamRange&) const = default;
};

enum class UnitKind { Embedding, Block, Head };

struct Unit {
  std::string name;                // "embed", "blocks.3", "head"
  UnitKind kind = UnitKind::Block;
  std::vector<ParamRange> params;  // every parameter the unit reads and writes gradients of (a tied head also the embedding)
  ParamRange owned;                // the parameters declared by this unit (disjoint across units, in order)
};

}  // namespace tessera::nn
