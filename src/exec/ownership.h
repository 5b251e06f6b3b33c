#pragma once
// Who owns each parameter's storage. Every parameter has three roles, each with exactly one owner:
//   master     the copy the optimizer updates (fp32; a shard of it under ZeRO), as segments;
//   working    the values the model reads during an action (maybe gathered, later maybe bf16);
//   gradient   where the model accumulates the parameter's gradient during an action.
// The store (nn::ParameterStore) owns all three at first. A transform that needs a role claims it,
// for every parameter or some: ZeRO-3 claims the working copies (it answers with the gathered
// buffer of the unit that runs) and the master (its shard), ZeRO-2 the gradients (the bucket of the
// microbatch that runs). A second claim of a claimed role is refused, naming both claimants, so
// two techniques never silently fight over one parameter's storage — they must be composed.
//
// Modules reach this through StepContext::weight/grad (nn::ParameterAccess); the interpreter sets
// the current event before each action, so an owner can answer for that action.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exec/transform.h"
#include "nn/parameters.h"
#include "optim/optimizer.h"

namespace tessera::exec {

enum class Role : uint8_t { Master, Working, Gradient };
std::string_view role_name(Role role);  // "master copy", "working copy", "gradient target"

class StorageOwner {
 public:
  virtual ~StorageOwner() = default;
  virtual std::string_view owner_name() const = 0;
  // Working role: the values of `p` for the action `event` (nullptr outside a program).
  virtual Tensor working(const nn::Parameter& p, const Event* event) { TS_FAIL("{} owns no working copies", owner_name()); }
  // Gradient role: where `p`'s gradient accumulates during `event`.
  virtual Tensor gradient_target(const nn::Parameter& p, const Event* event) {
    TS_FAIL("{} owns no gradient targets", owner_name());
  }
  // Whether the working copies it answers stay where they are, with the same values, from one
  // optimizer step to the next (the store's buffers, 2BW's two versions), rather than for one
  // action (ZeRO-3's gathered buffers). Mixed precision casts persistent ones once per step.
  virtual bool working_copies_persist() const { return false; }
  // Master role: the segments of the owned parameters `params` (in store order) this rank updates.
  virtual std::vector<optim::Segment> master_segments(std::span<const nn::Parameter* const> params) {
    TS_FAIL("{} owns no master copies", owner_name());
  }
};

class ParameterOwnership final : public nn::ParameterAccess {
 public:
  explicit ParameterOwnership(nn::ParameterStore& store);
  ~ParameterOwnership() override;
  ParameterOwnership(const ParameterOwnership&) = delete;
  ParameterOwnership& operator=(const ParameterOwnership&) = delete;

  // `owner` takes `role` of every parameter (or of `ids`). Refused when another claimant holds it.
  void claim(Role role, StorageOwner& owner);
  void claim(Role role, StorageOwner& owner, std::span<const int> ids);
  // Composition: `owner` takes `role` of every parameter on top of its current holders, and
  // answers it from what they answer (mixed precision casts whatever the store, ZeRO-3 or 2BW's
  // versions provide). Returns those holders [parameter id]. Refused when `owner` already holds
  // the role of some parameter, or when someone claims on top of it twice.
  std::vector<StorageOwner*> claim_over(Role role, StorageOwner& owner);
  // Gives every role `owner` holds back to the store (when the owner goes away), or to the holders
  // it was claimed over.
  void release(StorageOwner& owner);
  const StorageOwner& owner(Role role, const nn::Parameter& p) const;
  // Whether `owner` is the store's flat buffers, whose values change only where the optimizer
  // steps or a checkpoint loads (not from one action to the next).
  bool is_store(const StorageOwner& owner) const { return &owner == store_owner_.get(); }

  // The action being executed (null between programs); set by the interpreter.
  void set_event(const Event* event) { event_ = event; }

  // nn::ParameterAccess
  Tensor weight(const nn::Parameter& p) override;
  Tensor grad(const nn::Parameter& p) override;

  // Every master segment of this rank, owner by owner in the order of their first parameter.
  std::vector<optim::Segment> master_segments();

  nn::ParameterStore& store() { return store_; }

 private:
  StorageOwner*& slot(Role role, int id);

  nn::ParameterStore& store_;
  std::unique_ptr<StorageOwner> store_owner_;  // answers from the store's flat buffers
  std::vector<StorageOwner*> master_, working_, gradient_;  // [parameter id]
  struct Layer {
    Role role;
    StorageOwner* owner;
    std::vector<StorageOwner*> below;  // [parameter id]
  };
  std::vector<Layer> layers_;  // claims over other holders, oldest first
  const Event* event_ = nullptr;
};

}  // namespace tessera::exec
