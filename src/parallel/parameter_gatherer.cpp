#include "parallel/parameter_gatherer.h"

#include <cstring>

namespace tessera::parallel {

namespace {

// Posts an all-gather of `range` from the shards into `out` (range.size() elements); a group of
// one copies. Returns null when nothing is in flight.
dist::WorkPtr gather_range(dist::Communicator* comm, const ShardLayout& layout, int rank, const float* shard,
                           nn::ParamRange mine, nn::ParamRange range, float* out) {
  const nn::ParamRange part = layout.part(range, rank);
  const float* input = shard + (part.begin - mine.begin);
  if (comm == nullptr || comm->size() == 1) {
    std::memcpy(out, input, sizeof(float) * static_cast<size_t>(part.size()));
    return nullptr;
  }
  return comm->all_gather(input, out, layout.counts(range), DType::F32);
}

void wait_works(std::vector<dist::WorkPtr>& works) {
  std::vector<dist::WorkPtr> live;
  for (auto& w : works) {
    if (w) live.push_back(w);
  }
  dist::wait_all(live);
  works.clear();
}

}  // namespace

ParameterGatherer::ParameterGatherer(nn::ParameterStore& params, const std::vector<nn::Unit>& units,
                                     const ShardLayout& layout, int rank, dist::Communicator* comm,
                                     MemoryAccountant& memory)
    : params_(params), layout_(layout), rank_(rank), comm_(comm), memory_(memory), mine_(layout.shard(rank)) {
  shard_ = Tensor::empty({mine_.size()}, DType::F32, MemoryTag::Params, memory);
  std::memcpy(shard_.raw(), params.flat_values().data<float>() + mine_.begin, sizeof(float) * static_cast<size_t>(mine_.size()));
  for (const nn::Unit& unit : units) {
    UnitParams up;
    for (const nn::ParamRange& r : unit.params) {
      up.ranges.push_back(r);
      auto& inside = up.params.emplace_back();
      for (auto& p : params.all()) {
        const auto begin = static_cast<int64_t>(p.offset);
        if (begin >= r.begin && begin + p.numel() <= r.end && p.numel() > 0) inside.push_back(&p);
      }
    }
    unit_params_.push_back(std::move(up));
  }
  for (auto& p : params.all()) p.value = Tensor();
  params.flat_values() = Tensor();  // the last reference: the full buffer is freed here
}

ParameterGatherer::~ParameterGatherer() {
  try {
    drain();
  } catch (...) {
    // Destruction during an error: the job is ending anyway; do not throw from a destructor.
  }
}

void ParameterGatherer::drain() {
  for (auto& [item, g] : slots_) {
    wait_works(g.works);
    unpoint(unit_of(item));
  }
  slots_.clear();
}

size_t ParameterGatherer::largest_unit_bytes() const {
  size_t best = 0;
  for (const UnitParams& up : unit_params_) {
    size_t bytes = 0;
    for (const auto& r : up.ranges) bytes += sizeof(float) * static_cast<size_t>(r.size());
    best = std::max(best, bytes);
  }
  return best;
}

void ParameterGatherer::begin_pass(bool with_backward) {
  drain();
  pass_items_ = with_backward ? 2 * units() : units();
}

void ParameterGatherer::post(int item) {
  const UnitParams& up = unit_params_[static_cast<size_t>(unit_of(item))];
  Gathered g;
  for (const nn::ParamRange& r : up.ranges) {
    Tensor buffer = Tensor::empty({r.size()}, DType::F32, MemoryTag::Comm, memory_);
    g.works.push_back(gather_range(comm_, layout_, rank_, shard(), mine_, r, buffer.data<float>()));
    g.buffers.push_back(std::move(buffer));
  }
  slots_.emplace(item, std::move(g));
}

void ParameterGatherer::point(int unit, const Gathered& g) {
  const UnitParams& up = unit_params_[static_cast<size_t>(unit)];
  for (size_t i = 0; i < up.ranges.size(); ++i) {
    for (nn::Parameter* p : up.params[i]) {
      const int64_t at = static_cast<int64_t>(p->offset) - up.ranges[i].begin;
      p->value = g.buffers[i].slice(0, at, at + p->numel()).reshape(p->shape);
    }
  }
}

void ParameterGatherer::unpoint(int unit) {
  for (const auto& inside : unit_params_[static_cast<size_t>(unit)].params) {
    for (nn::Parameter* p : inside) p->value = Tensor();
  }
}

void ParameterGatherer::before(int unit, bool backward) {
  const int item = backward ? 2 * units() - 1 - unit : unit;
  TS_CHECK(item < pass_items_, "ZeRO-3: {} of unit {} outside a pass; call begin_microbatch() or begin_evaluation() "
           "before running the model", backward ? "backward" : "forward", unit);
  if (!slots_.count(item)) post(item);
  Gathered& g = slots_.at(item);
  wait_works(g.works);
  point(unit, g);
  // Prefetch: the next unit's gather moves while this one computes.
  if (item + 1 < pass_items_ && !slots_.count(item + 1)) post(item + 1);
}

void ParameterGatherer::after(int unit, bool backward) {
  const int item = backward ? 2 * units() - 1 - unit : unit;
  unpoint(unit);
  slots_.erase(item);
}

ParameterGatherer::Full ParameterGatherer::gather_all() {
  drain();
  Tensor full = Tensor::empty({layout_.numel()}, DType::F32, MemoryTag::Comm, memory_);
  auto* out = full.data<float>();
  std::memcpy(out + mine_.begin, shard(), sizeof(float) * static_cast<size_t>(mine_.size()));
  if (comm_ != nullptr && comm_->size() > 1) {
    // In place: this rank's chunk is already where it belongs in the output.
    std::vector<size_t> counts = layout_.counts({0, layout_.numel()});
    comm_->all_gather(out + mine_.begin, out, counts, DType::F32)->wait();
  }
  for (auto& p : params_.all()) {
    const auto at = static_cast<int64_t>(p.offset);
    p.value = full.slice(0, at, at + p.numel()).reshape(p.shape);
  }
  return Full(*this, std::move(full));
}

ParameterGatherer::Full::~Full() {
  if (owner_ == nullptr || !buffer_.defined()) return;
  for (auto& p : owner_->params_.all()) p.value = Tensor();
}

void ParameterGatherer::Full::write_back() {
  const nn::ParamRange mine = owner_->mine_;
  std::memcpy(owner_->shard(), buffer_.data<float>() + mine.begin, sizeof(float) * static_cast<size_t>(mine.size()));
}

}  // namespace tessera::parallel
