#include "optim/offloaded_optimizer.h"

#include <algorithm>
#include <map>

#include "ops/elementwise.h"

namespace tessera::optim {

namespace {

// The end of the chunk that starts at segment `first`: whole parameters, at least one, as many as
// stay within `chunk_bytes` of state.
size_t chunk_end(std::span<const Segment> segments, size_t first, const OffloadedOptimizer::StateBytes& state_bytes,
                 int64_t chunk_bytes) {
  size_t end = first;
  while (end < segments.size()) {
    size_t next = end + 1;
    while (next < segments.size() && segments[next].param == segments[end].param) ++next;
    if (end > first && state_bytes(segments.subspan(first, next - first)) > chunk_bytes) break;
    end = next;
  }
  return end;
}

}  // namespace

OffloadedOptimizer::OffloadedOptimizer(std::span<const Segment> segments, const Factory& make,
                                       const StateBytes& state_bytes, memory::NvmeStore& store, int64_t chunk_bytes,
                                       MemoryAccountant& memory, OffloadedValues* values,
                                       OffloadedGradients* grads)
    : store_(store), memory_(memory), values_(values), grads_(grads) {
  TS_CHECK(!segments.empty(), "an offloaded optimizer over no parameters");
  TS_CHECK(chunk_bytes > 0, "optimizer state chunks of {} bytes", chunk_bytes);
  owned_elements_ = total_elements(segments);
  int64_t element = 0;
  for (size_t first = 0; first < segments.size();) {
    Chunk& c = chunks_.emplace_back();
    c.first = first;
    c.end = chunk_end(segments, first, state_bytes, chunk_bytes);
    for (size_t i = c.first; i < c.end; ++i) c.sizes.push_back(segments[i].size());
    c.first_element = element;
    c.elements = total_elements(segments.subspan(c.first, c.end - c.first));
    element += c.elements;
    c.optimizer = make(segments.subspan(c.first, c.end - c.first));
    for (const StateTensor& t : c.optimizer->state_dict().tensors) {
      const std::shared_ptr<Storage>& s = t.values.storage();
      if (!t.values.defined() || !s->movable() || s->bytes() == 0) continue;
      if (std::find(c.storages.begin(), c.storages.end(), s) == c.storages.end()) c.storages.push_back(s);
    }
    for (const std::shared_ptr<Storage>& s : c.storages) c.extents.push_back(store_.allocate(s->bytes()));
    write_back(c);
    evict(c);
    first = c.end;
  }
}

OffloadedOptimizer::~OffloadedOptimizer() {
  for (Chunk& c : chunks_) {
    for (const auto* works : {&c.works, &c.value_writes}) {
      for (const std::shared_ptr<memory::CopyWork>& w : *works) {
        try {
          if (w) w->wait();
        } catch (const std::exception&) {
          // The run is already ending with the error that stopped it.
        }
      }
    }
    for (const memory::Extent& e : c.extents) store_.release(e);
  }
}

void OffloadedOptimizer::write_back(Chunk& c) {
  c.works.clear();
  for (size_t i = 0; i < c.storages.size(); ++i) {
    c.works.push_back(store_.write(c.extents[i], c.storages[i]->data(), c.storages[i]->bytes()));
  }
}

void OffloadedOptimizer::evict(Chunk& c) {
  for (const std::shared_ptr<memory::CopyWork>& w : c.works) w->wait();
  c.works.clear();
  for (const std::shared_ptr<Storage>& s : c.storages) s->evict(Tier::Nvme);
  put_values(c);
  c.resident = false;
}

void OffloadedOptimizer::put_values(Chunk& c) {
  for (const std::shared_ptr<memory::CopyWork>& w : c.value_writes) w->wait();
  c.value_writes.clear();
  c.values = Tensor();
}

void OffloadedOptimizer::fetch_values(Chunk& c) {
  if (values_ == nullptr || c.values.defined()) return;
  c.values = Tensor::empty({c.elements}, DType::F32, MemoryTag::Params, memory_);
  for (auto& w : values_->read(c.first_element, c.elements, c.values.data<float>())) c.works.push_back(std::move(w));
}

void OffloadedOptimizer::fetch_grads(Chunk& c) {
  if (grads_ == nullptr || c.grads.defined()) return;
  c.grads = Tensor::empty({c.elements}, DType::F32, MemoryTag::Grads, memory_);
  for (auto& w : grads_->read(c.first_element, c.elements, c.grads.data<float>())) c.works.push_back(std::move(w));
}

void OffloadedOptimizer::write_values(Chunk& c) {
  if (values_ == nullptr) return;
  for (auto& w : values_->write(c.first_element, c.elements, c.values.data<float>())) {
    c.value_writes.push_back(std::move(w));
  }
}

void OffloadedOptimizer::fetch(Chunk& c) {
  if (c.resident) return;
  c.works.clear();
  for (size_t i = 0; i < c.storages.size(); ++i) {
    void* into = c.storages[i]->make_resident();
    c.works.push_back(store_.read(c.extents[i], into, c.storages[i]->bytes()));
  }
  c.resident = true;
}

void OffloadedOptimizer::wait(Chunk& c) {
  for (const std::shared_ptr<memory::CopyWork>& w : c.works) w->wait();
  c.works.clear();
}

void OffloadedOptimizer::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(segments.size() == chunks_.back().end, "offloaded optimizer: {} segments, its chunks cover {}",
           segments.size(), chunks_.back().end);
  // The last chunk of the step before has finished its write-back behind the forward and backward;
  // unless it is one of those read ahead, it leaves before this step's first chunks come in.
  if (chunks_.size() > kReadAhead && chunks_.back().resident) evict(chunks_.back());
  // Chunk k updates while k + 1 is read and k − 1 is written: three chunks' state at most (and,
  // with offloaded values, three chunks' values).
  const auto read = [&](Chunk& c) {
    fetch(c);
    fetch_values(c);
    fetch_grads(c);
  };
  read(chunks_.front());
  for (size_t k = 0; k < chunks_.size(); ++k) {
    Chunk& c = chunks_[k];
    if (k + 1 < chunks_.size()) read(chunks_[k + 1]);
    wait(c);
    std::vector<Segment> mine(segments.begin() + static_cast<std::ptrdiff_t>(c.first),
                              segments.begin() + static_cast<std::ptrdiff_t>(c.end));
    if (values_ != nullptr) {
      int64_t at = 0;
      for (Segment& s : mine) {
        s.value = c.values.data<float>() + at;
        at += s.size();
      }
    }
    if (grads_ != nullptr) {
      for (float factor : grads_->scales()) ops::scale(c.grads, c.grads, factor);
      float* grads = c.grads.data<float>();
      int64_t at = 0;
      for (Segment& s : mine) {
        s.grad = grads + at;
        at += s.size();
      }
    }
    c.optimizer->step(lr, mine);
    c.grads = Tensor();
    if (k > 0) evict(chunks_[k - 1]);
    write_back(c);
    write_values(c);
  }
  // The master values are back in the nvme tier before the step ends: the next forward's gathers
  // read them there.
  put_values(chunks_.back());
  // The last write-back and the next step's first reads then run behind the next forward and
  // backward instead of at either end of the update, where the disk is all the step waits on.
  for (size_t k = 0; k < std::min(kReadAhead, chunks_.size()); ++k) fetch(chunks_[k]);
}

StateDict OffloadedOptimizer::state_dict() {
  // Every chunk's state, concatenated in segment order: the state of one optimizer over all of them.
  StateDict whole;
  whole.steps = steps_taken();
  std::vector<std::vector<StateTensor>> parts;
  for (Chunk& c : chunks_) {
    fetch(c);
    wait(c);
    parts.push_back(c.optimizer->state_dict().tensors);
  }
  for (size_t t = 0; t < parts.front().size(); ++t) {
    int64_t elements = 0;
    for (const auto& p : parts) elements += p[t].values.defined() ? p[t].values.numel() : 0;
    const StateTensor& first = parts.front()[t];
    StateTensor joined{first.name, Tensor(), {}};
    if (elements > 0 || first.values.defined()) {
      joined.values = Tensor::empty({elements}, first.values.dtype(), MemoryTag::Optimizer, memory_);
    }
    int64_t at = 0;
    const bool per_segment = std::any_of(parts.begin(), parts.end(), [&](const auto& p) { return !p[t].segment_offsets.empty(); });
    if (per_segment) joined.segment_offsets.push_back(0);
    for (size_t k = 0; k < parts.size(); ++k) {
      const StateTensor& piece = parts[k][t];
      const int64_t n = piece.values.defined() ? piece.values.numel() : 0;
      if (n > 0) joined.values.slice(0, at, at + n).copy_from(piece.values.reshape({n}));
      if (per_segment) {
        // A chunk's part offsets, or one part per element of each of its segments.
        int64_t elements_before = 0;
        for (size_t i = 0; i < chunks_[k].sizes.size(); ++i) {
          elements_before += chunks_[k].sizes[i];
          joined.segment_offsets.push_back(at + (piece.segment_offsets.empty() ? elements_before
                                                                               : piece.segment_offsets[i + 1]));
        }
      }
      at += n;
    }
    whole.tensors.push_back(std::move(joined));
  }
  for (Chunk& c : chunks_) {
    write_back(c);
    evict(c);
  }
  return whole;
}

void OffloadedOptimizer::load_state_dict(StateDict state) {
  // Each chunk takes its part of every tensor, found by the lengths of its own state.
  std::map<std::string, int64_t> at;
  for (Chunk& c : chunks_) {
    fetch(c);
    wait(c);
    StateDict mine = c.optimizer->state_dict();
    for (StateTensor& t : mine.tensors) {
      const int64_t n = t.values.defined() ? t.values.numel() : 0;
      const Tensor& whole = state.at(t.name);
      int64_t& from = at[t.name];
      TS_CHECK(from + n <= whole.numel(), "optimizer state '{}' holds {} elements, fewer than its chunks need",
               t.name, whole.numel());
      if (n > 0) t.values = whole.reshape({whole.numel()}).slice(0, from, from + n);
      from += n;
    }
    mine.steps = state.steps;
    c.optimizer->load_state_dict(std::move(mine));
    write_back(c);
    evict(c);
  }
}

void OffloadedOptimizer::load_chunk_by_chunk(int64_t steps, const ChunkFill& fill) {
  std::vector<int64_t> offsets;
  for (Chunk& c : chunks_) {
    // Reads or writes in flight (the read-ahead, the last write-back) end before the bytes are
    // replaced; a chunk in the nvme tier only needs its compute memory back, since every byte of
    // it is about to be written.
    if (c.resident) {
      wait(c);
      for (const std::shared_ptr<memory::CopyWork>& w : c.value_writes) w->wait();
    } else {
      for (const std::shared_ptr<Storage>& s : c.storages) s->make_resident();
      c.resident = true;
    }
    StateDict mine = c.optimizer->state_dict();
    offsets.assign(1, 0);
    for (const int64_t size : c.sizes) offsets.push_back(offsets.back() + size);
    try {
      for (const StateTensor& t : mine.tensors) {
        TS_CHECK(t.segment_offsets.empty() && (!t.values.defined() || t.values.numel() == c.elements),
                 "{}: its state '{}' is not one value per element, so it is not loaded chunk by chunk; load it "
                 "whole with load_state_dict()", name(), t.name);
      }
      fill(mine, c.first, offsets);
    } catch (...) {
      // Half-written bytes never reach a step: the chunk goes back to what the nvme tier holds.
      for (const std::shared_ptr<Storage>& s : c.storages) s->evict(Tier::Nvme);
      put_values(c);
      c.resident = false;
      throw;
    }
    mine.steps = steps;
    c.optimizer->load_state_dict(std::move(mine));
    write_back(c);
    evict(c);
  }
}

size_t OffloadedOptimizer::ChunkReader::chunk_of(size_t segment) const {
  const std::vector<Chunk>& chunks = owner_.chunks_;
  const auto it = std::upper_bound(chunks.begin(), chunks.end(), segment,
                                   [](size_t s, const Chunk& c) { return s < c.first; });
  TS_CHECK(it != chunks.begin() && segment < std::prev(it)->end,
           "offloaded optimizer: segment {} lies outside its chunks, which cover {}", segment, chunks.back().end);
  return static_cast<size_t>(std::prev(it) - chunks.begin());
}

const StateDict& OffloadedOptimizer::ChunkReader::read(size_t chunk) {
  if (current_ == chunk) return state_;
  finish();
  Chunk& c = owner_.chunks_.at(chunk);
  evict_current_ = !c.resident;
  current_ = chunk;
  // A chunk resident between steps has reads (read ahead) or writes (the last write-back) in
  // flight: both leave its compute copy what the nvme tier holds once they end.
  owner_.fetch(c);
  owner_.wait(c);
  state_ = c.optimizer->state_dict();
  offsets_.assign(1, 0);
  for (const int64_t size : c.sizes) offsets_.push_back(offsets_.back() + size);
  return state_;
}

void OffloadedOptimizer::ChunkReader::finish() {
  state_ = StateDict();
  if (current_.has_value() && evict_current_) {
    // Only read: the nvme tier still holds these bytes, so the compute copy goes without a write.
    owner_.evict(owner_.chunks_[*current_]);
  }
  current_.reset();
  evict_current_ = false;
}

OffloadedOptimizer::ChunkReader::~ChunkReader() {
  try {
    finish();
  } catch (const std::exception&) {
    // Only an error already on its way out ends a reader early; the optimizer's own destructor
    // waits for what is left.
  }
}

}  // namespace tessera::optim
