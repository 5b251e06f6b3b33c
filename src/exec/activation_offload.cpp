#include "exec/activation_offload.h"

#include <algorithm>

namespace tessera::exec {

ActivationOffload::ActivationOffload(memory::NvmeStore& store) : store_(store) {}

ActivationOffload::~ActivationOffload() {
  // A step that failed midway leaves moves behind: finish them so no copy reads freed memory, and
  // give the store its space back.
  for (auto& [storage, m] : moved_) {
    try {
      if (m.work) m.work->wait();
    } catch (const std::exception&) {
      // The run is already ending with the error that stopped it.
    }
    if (!m.extent.empty()) store_.release(m.extent);
  }
}

void ActivationOffload::begin(const Program& program) {
  TS_CHECK(units_.empty(), "activation offload: a program begins while {} units' activations of the last one are "
           "still held", units_.size());
  unit_actions_ = 0;
}

void ActivationOffload::before(const Event& event) {
  const int now = unit_actions_++;
  evict_written_before(now - 1);
  const Action& a = event.action();
  if (!writes_gradients(a.phase) || a.phase == Phase::BackwardWeight) return;
  make_resident({a.microbatch, a.unit});
  // Prefetch: the next backward of this rank's program reads its activations next.
  for (int j = event.index + 1; j < static_cast<int>(event.program->actions.size()); ++j) {
    const Action& next = event.program->actions[static_cast<size_t>(j)];
    if (next.kind != Action::Kind::Unit || !writes_gradients(next.phase) || next.phase == Phase::BackwardWeight) {
      continue;
    }
    fetch({next.microbatch, next.unit});
    break;
  }
}

void ActivationOffload::after(const Event& event) {
  const Action& a = event.action();
  if (a.phase == Phase::Forward && a.offload && event.saved != nullptr) {
    std::vector<const Storage*>& held = units_[{a.microbatch, a.unit}];
    for (const nn::SavedTensor& t : *event.saved) {
      const std::shared_ptr<Storage>& s = t.tensor.storage();
      if (s->tag() != MemoryTag::Activations || !s->movable() || s->bytes() == 0) continue;
      if (std::find(held.begin(), held.end(), s.get()) != held.end()) continue;  // another view of it
      held.push_back(s.get());
      auto [it, fresh] = moved_.try_emplace(s.get());
      Moved& m = it->second;
      if (!fresh) continue;  // saved by another unit too: it moves once
      m.storage = s;
      m.extent = store_.allocate(s->bytes());
      m.work = store_.write(m.extent, s->data(), s->bytes());
      m.written_at = unit_actions_ - 1;
    }
  }
}

void ActivationOffload::finish(const Program& program) {
  TS_CHECK(units_.empty(), "activation offload: the program finished with {} units' activations still held (a "
           "backward did not run)", units_.size());
}

void ActivationOffload::evict_written_before(int unit_action) {
  for (auto& [storage, m] : moved_) {
    if (m.state != State::Writing || m.written_at >= unit_action) continue;
    m.work->wait();
    m.work.reset();
    m.storage->evict(Tier::Nvme);
    m.state = State::OnNvme;
  }
}

void ActivationOffload::fetch(const UnitKey& key) {
  const auto it = units_.find(key);
  if (it == units_.end()) return;
  for (const Storage* s : it->second) {
    Moved& m = moved_.at(s);
    if (m.state != State::OnNvme) continue;
    void* into = m.storage->make_resident();
    m.work = store_.read(m.extent, into, m.storage->bytes());
    m.state = State::Reading;
  }
}

void ActivationOffload::make_resident(const UnitKey& key) {
  const auto it = units_.find(key);
  if (it == units_.end()) return;
  fetch(key);  // what no earlier backward prefetched
  for (const Storage* s : it->second) {
    Moved& m = moved_.at(s);
    if (m.state == State::Writing || m.state == State::Reading) {
      m.work->wait();
      m.work.reset();
    }
    if (!m.extent.empty()) store_.release(m.extent);
  }
  // Back in compute memory for good, the unit's own again: its backward frees each tensor as soon
  // as it is done with it, as without offloading, and a storage freed there may be reused.
  release(key);
}

void ActivationOffload::release(const UnitKey& key) {
  const auto it = units_.find(key);
  if (it == units_.end()) return;
  const std::vector<const Storage*> held = std::move(it->second);
  units_.erase(it);
  for (const Storage* s : held) {
    moved_.erase(s);
    // A storage two units saved is resident for both now: the other forgets it too.
    for (auto& [other, storages] : units_) std::erase(storages, s);
  }
}

}  // namespace tessera::exec
