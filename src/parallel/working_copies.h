#pragma once
// Mixed precision's working copies: a transform in the Precision slot and the owner of every
// parameter's working role, taken over whoever held it (exec::ParameterOwnership::claim_over).
// The model then reads bf16 (or f16) copies of what the store, ZeRO-3's gatherer or 2BW's versions
// answer, while the master copy, its gradients and the optimizer state stay f32.
//
// When a copy is made:
//   - of a persistent source (the store's values, 2BW's stash): at its first read after an
//     optimizer step or the start of a program (a checkpoint may have loaded new values between
//     programs), into storage kept from step to step (tag working_copies). So each parameter is
//     cast once per step, and only the parameters this rank's program reads;
//   - of a per-action source (ZeRO-3's gathered buffer of the running unit): at its first read in
//     the action, freed after it.
// A copy is never stale: the engine calls invalidate() after each optimizer step, which is also
// where 2BW's stash changes.
#include <string_view>
#include <vector>

#include "exec/ownership.h"
#include "exec/transform.h"
#include "nn/parameters.h"

namespace tessera::parallel {

class WorkingCopies final : public exec::Transform, public exec::StorageOwner {
 public:
  // Takes the working role of every parameter over its current holders; `dtype` is BF16 or F16.
  WorkingCopies(const nn::ParameterStore& params, DType dtype, MemoryAccountant& memory,
                exec::ParameterOwnership& ownership);
  ~WorkingCopies() override;  // gives the role back to those holders
  WorkingCopies(const WorkingCopies&) = delete;
  WorkingCopies& operator=(const WorkingCopies&) = delete;

  DType dtype() const { return dtype_; }
  // The master values changed (an optimizer step): every persistent copy is cast again when read.
  void invalidate();
  // Casts made so far (each of one parameter), for tests.
  int64_t casts() const { return casts_; }

  // exec::Transform
  std::string_view name() const override { return "mixed-precision working copies"; }
  void begin(const exec::Program& program) override { invalidate(); }
  void after(const exec::Event& event) override;

  // exec::StorageOwner
  std::string_view owner_name() const override { return "mixed-precision working copies"; }
  Tensor working(const nn::Parameter& p, const exec::Event* event) override;

 private:
  // A copy of one source tensor (2BW answers one parameter from two: its versions).
  struct Copy {
    const void* source = nullptr;
    Tensor copy;  // [the parameter's shape] in dtype_
    bool fresh = false;
  };
  void cast(Tensor& copy, const Tensor& source);

  DType dtype_;
  MemoryAccountant& memory_;
  exec::ParameterOwnership& ownership_;
  std::vector<exec::StorageOwner*> below_;   // [parameter id]: who answered before
  std::vector<std::vector<Copy>> persistent_;  // [parameter id]
  std::vector<Tensor> per_action_;             // [parameter id]: this action's copies
  std::vector<int> per_action_ids_;            // the ids holding one
  int64_t casts_ = 0;
};

}  // namespace tessera::parallel
