#pragma once
// What a unit saved for its backward, and how the backward reads each tensor: what an encoding of
// the stash may lose (exec/activation_encoding.h, after Gist's binarization and delayed precision
// reduction). Modules say it where they save (each Ctx's for_each_tensor), because only they know
// what their backward reads.
#include <cstdint>

#include "core/tensor.h"

namespace tessera::nn {

enum class SavedUse : uint8_t {
  Values,      // every bit of every element
  Sign,        // only whether each element is positive (a ReLU's input): one bit an element keeps it
  Statistics,  // per-row statistics (norms' mean and 1/σ, log-sum-exp): small, and kept exact
};

struct SavedTensor {
  Tensor tensor;
  SavedUse use = SavedUse::Values;
};

}  // namespace tessera::nn
