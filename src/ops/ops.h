#pragma once
// The ops layer: tensor-level operations that the modules in nn and the optimizers in optim call
// instead of raw-pointer kernels. Each op checks its tensors (shapes against each other, one
// dtype, contiguous, one device), names itself and the offending tensor when it refuses them, and
// dispatches on (device, dtype) to a backend's kernels through the one seam in ops/dispatch.h.
// Outputs are tensors the caller allocated; an undefined Tensor means "none" for optional
// arguments. An op costs one dispatch and a few comparisons: it allocates and copies nothing.
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/optimizer_update.h"
