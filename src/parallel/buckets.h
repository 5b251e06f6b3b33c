#pragma once
// Gradient buckets: contiguous ranges of the flat gradient buffer, reduced as one collective each.
// Backward runs the model's units in reverse (head first, embedding last), so buckets are filled
// from the end of the buffer: a bucket is a run of whole units, closed once it holds at least the
// bucket size. (Splitting a unit would not post anything earlier: all of a unit's gradients
// complete together, at its after_backward.)
//
// A unit may write gradients outside the range it owns (a tied head writes the embedding's), so
// each bucket records the first unit in backward order that writes into it (its storage must exist
// from that unit's before_backward on) and the last one (after that unit's after_backward the
// bucket is complete and its reduction is posted). The reducer itself does not rely on backward's
// order: it finds, in each program, the last action of a writer (parallel/gradient_reducer.h).
#include <cstdint>
#include <vector>

#include "nn/unit.h"

namespace tessera::parallel {

struct Bucket {
  nn::ParamRange range;
  int first_unit = 0;        // the first unit backward reaches that writes into the bucket (highest index)
  int complete_unit = 0;     // the last one (lowest index): the bucket is complete after its backward
  std::vector<int> writers;  // every unit that writes gradients into the bucket, ascending
};

// Buckets in the order backward completes them (the end of the buffer first). `bucket_elems` >= 1.
// `domain`: the flat ranges to reduce, in flat order (empty: the whole buffer). A bucket lies inside
// one of them, so a ZeRO shard layout over the same pieces can reduce-scatter it in place; where a
// piece starts inside a unit (a pipeline rank holds the tied embedding but not the position
// table), the unit's range is cut there.
std::vector<Bucket> plan_buckets(const std::vector<nn::Unit>& units, int64_t bucket_elems,
                                 const std::vector<nn::ParamRange>& domain = {});

}  // namespace tessera::parallel
