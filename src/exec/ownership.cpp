#include "exec/ownership.h"

#include <algorithm>

namespace tessera::exec {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::Master: return "master copy";
    case Role::Working: return "working copy";
    case Role::Gradient: return "gradient target";
  }
  return "unknown role";
}

namespace {

// The default owner of every role: the store's flat buffers, while it holds them.
class StoreOwner final : public StorageOwner {
 public:
  explicit StoreOwner(nn::ParameterStore& store) : store_(store) {}
  std::string_view owner_name() const override { return "the parameter store"; }
  Tensor working(const nn::Parameter& p, const Event*) override { return store_.value(p); }
  bool working_copies_persist() const override { return true; }
  Tensor gradient_target(const nn::Parameter& p, const Event*) override { return store_.grad_of(p); }
  std::vector<optim::Segment> master_segments(std::span<const nn::Parameter* const> params) override {
    std::vector<optim::Segment> out;
    for (const nn::Parameter* p : params) {
      out.push_back({p, 0, p->numel(), store_.value(*p).data<float>(), store_.grad_of(*p).data<float>(),
                     p->spec.split_mask()});
    }
    return out;
  }

 private:
  nn::ParameterStore& store_;
};

}  // namespace

ParameterOwnership::ParameterOwnership(nn::ParameterStore& store)
    : store_(store), store_owner_(std::make_unique<StoreOwner>(store)) {
  const auto n = static_cast<size_t>(store.size());
  master_.assign(n, store_owner_.get());
  working_.assign(n, store_owner_.get());
  gradient_.assign(n, store_owner_.get());
}

ParameterOwnership::~ParameterOwnership() = default;

StorageOwner*& ParameterOwnership::slot(Role role, int id) {
  TS_CHECK(id >= 0 && id < store_.size(), "no parameter with id {}", id);
  std::vector<StorageOwner*>& table = role == Role::Master ? master_ : role == Role::Working ? working_ : gradient_;
  return table[static_cast<size_t>(id)];
}

void ParameterOwnership::claim(Role role, StorageOwner& owner) {
  std::vector<int> all(static_cast<size_t>(store_.size()));
  for (int i = 0; i < store_.size(); ++i) all[static_cast<size_t>(i)] = i;
  claim(role, owner, all);
}

void ParameterOwnership::claim(Role role, StorageOwner& owner, std::span<const int> ids) {
  for (int id : ids) {
    StorageOwner* holder = slot(role, id);
    TS_CHECK(holder == store_owner_.get() || holder == &owner,
             "parameter '{}': its {} is owned by {}; {} cannot own it too (compose the two techniques instead)",
             store_.all()[static_cast<size_t>(id)].name, role_name(role), holder->owner_name(), owner.owner_name());
  }
  for (int id : ids) slot(role, id) = &owner;
}

std::vector<StorageOwner*> ParameterOwnership::claim_over(Role role, StorageOwner& owner) {
  std::vector<StorageOwner*> below;
  for (int id = 0; id < store_.size(); ++id) {
    StorageOwner* holder = slot(role, id);
    TS_CHECK(holder != &owner, "parameter '{}': {} already owns its {}", store_.all()[static_cast<size_t>(id)].name,
             owner.owner_name(), role_name(role));
    below.push_back(holder);
  }
  for (const Layer& layer : layers_) {
    TS_CHECK(layer.role != role, "{} cannot take the {}s over {}, which holds them over other owners already (one "
             "layer per role)", owner.owner_name(), role_name(role), layer.owner->owner_name());
  }
  for (int id = 0; id < store_.size(); ++id) slot(role, id) = &owner;
  layers_.push_back({role, &owner, below});
  return below;
}

void ParameterOwnership::release(StorageOwner& owner) {
  for (auto layer = layers_.begin(); layer != layers_.end();) {
    if (layer->owner != &owner) {
      ++layer;
      continue;
    }
    for (int id = 0; id < store_.size(); ++id) {
      StorageOwner*& o = slot(layer->role, id);
      if (o == &owner) o = layer->below[static_cast<size_t>(id)];
    }
    layer = layers_.erase(layer);
  }
  for (std::vector<StorageOwner*>* table : {&master_, &working_, &gradient_}) {
    for (StorageOwner*& o : *table) {
      if (o == &owner) o = store_owner_.get();
    }
  }
}

const StorageOwner& ParameterOwnership::owner(Role role, const nn::Parameter& p) const {
  return *const_cast<ParameterOwnership*>(this)->slot(role, p.id);
}

Tensor ParameterOwnership::weight(const nn::Parameter& p) { return working_[static_cast<size_t>(p.id)]->working(p, event_); }

Tensor ParameterOwnership::grad(const nn::Parameter& p) {
  return gradient_[static_cast<size_t>(p.id)]->gradient_target(p, event_);
}

std::vector<optim::Segment> ParameterOwnership::master_segments() {
  std::vector<StorageOwner*> owners;
  for (StorageOwner* o : master_) {
    if (std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
  }
  std::vector<optim::Segment> out;
  for (StorageOwner* o : owners) {
    std::vector<const nn::Parameter*> mine;
    for (const auto& p : store_.all()) {
      if (master_[static_cast<size_t>(p.id)] == o) mine.push_back(&p);
    }
    std::vector<optim::Segment> part = o->master_segments(mine);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace tessera::exec
