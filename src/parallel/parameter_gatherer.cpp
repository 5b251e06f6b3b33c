#include "parallel/parameter_gatherer.h"

#include <algorithm>
#include <exception>

#include "ops/elementwise.h"

namespace tessera::parallel {

namespace {

// The flat elements of `p`.
nn::ParamRange flat_range(const nn::Parameter& p) {
  const auto at = static_cast<int64_t>(p.offset);
  return {at, at + p.numel()};
}

// n f32 elements at `data` as a 1-D tensor view, for the ops layer's copy: the moves between the
// shard and the gathered parameters go through ops::copy, so a device backend supplies them.
Tensor elements_at(const float* data, int64_t n) {
  // from_external takes a writable pointer; a view made of a copy's source is only read.
  return Tensor::from_external(const_cast<float*>(data), {n}, DType::F32);
}

void copy_elements(float* dst, const float* src, int64_t n) {
  if (n > 0) ops::copy(elements_at(dst, n), elements_at(src, n));
}

// Posts an all-gather of `range` (inside one piece) from the shards into `out` (range.size()
// elements), `input` being this rank's part of it; a group of one copies. Returns null when nothing
// is in flight.
dist::WorkPtr gather_range(dist::Communicator* comm, const ShardLayout& layout, const float* input,
                           nn::ParamRange range, float* out) {
  if (comm == nullptr || comm->size() == 1) {
    copy_elements(out, input, range.size());
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
                                     MemoryAccountant& memory, exec::ParameterOwnership& ownership,
                                     memory::NvmeStore* nvme, std::vector<int> kept_units, const GatherScope& scope)
    : layout_(layout),
      store_numel_(params.numel()),
      kept_units_(std::move(kept_units)),
      rank_(rank),
      comm_(comm),
      memory_(memory) {
  if (nvme != nullptr) {
    TS_CHECK(layout.pieces().size() <= 1, "memory.offload_params keeps a shard of one contiguous range in the nvme "
             "tier, and this rank's is {} pieces (a pipeline stage's parameters)", layout.pieces().size());
    mine_ = layout.shard(rank);
    if (params.deferred()) {
      offloaded_ = std::make_unique<OffloadedShard>(*nvme, params, mine_);
      write_initial_values(params, memory);
    } else {
      offloaded_ = std::make_unique<OffloadedShard>(*nvme, params, mine_, params.flat_values().data<float>() + mine_.begin);
    }
  } else {
    const float* values = params.flat_values().data<float>();
    shard_ = Tensor::empty({layout.shard_size(rank)}, DType::F32, MemoryTag::Params, memory);
    float* out = shard_.data<float>();
    for (const nn::ParamRange& part : layout.shards(rank)) {
      copy_elements(out, values + part.begin, part.size());
      out += part.size();
    }
  }
  // A unit's ranges cut where the layout's pieces end, so that each is gathered within one piece;
  // under a pipeline the parts outside this rank's domain belong to units another rank runs.
  for (const nn::Unit& unit : units) {
    UnitParams up;
    for (const nn::ParamRange& r : unit.params) {
      for (const nn::ParamRange& piece : layout.pieces()) {
        const nn::ParamRange common = intersect(r, piece);
        if (common.size() > 0) up.ranges.push_back(common);
      }
    }
    unit_params_.push_back(std::move(up));
  }
  if (scope.working_ids.empty()) {
    ownership.claim(exec::Role::Working, *this);
  } else {
    ownership.claim(exec::Role::Working, *this, scope.working_ids);
  }
  if (!scope.releases_store) return;
  params.release_values("ZeRO-3 (each rank keeps a shard; units are gathered while they run)");
  // The whole buffer goes back to the system rather than to the accountant's cache of free blocks:
  // no later buffer has its size, and keeping it would keep the memory ZeRO-3 exists to free.
  memory.release_cache();
}

void ParameterGatherer::write_initial_values(const nn::ParameterStore& params, MemoryAccountant& memory) {
  // One parameter's part at a time in compute memory: the model's values are never whole here.
  for (const nn::Parameter& p : params.all()) {
    const auto first = static_cast<int64_t>(p.offset);
    const nn::ParamRange part = intersect({first, first + p.numel()}, mine_);
    if (part.size() == 0) continue;
    Tensor values = Tensor::empty({part.size()}, DType::F32, MemoryTag::Params, memory);
    params.initial_values(p, part.begin - first, part.end - first, values.data<float>());
    OffloadedShard::Works writes = offloaded_->write_range(part, values.data<float>());
    wait_all(writes);
  }
}

ParameterGatherer::~ParameterGatherer() {
  try {
    drain();
  } catch (...) {
    // Destruction during an error: the job is ending anyway; do not throw from a destructor.
  }
}

void ParameterGatherer::drain() {
  // Every transfer is waited for before its buffers go, even after an error.
  std::exception_ptr error;
  for (auto& [run, g] : slots_) {
    try {
      wait_all(g.reads);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    wait_works(g.works);
  }
  slots_.clear();
  if (error) std::rethrow_exception(error);
}

size_t ParameterGatherer::unit_bytes(int unit) const {
  size_t bytes = 0;
  for (const auto& r : unit_params_[static_cast<size_t>(unit)].ranges) bytes += sizeof(float) * static_cast<size_t>(r.size());
  return bytes;
}

size_t ParameterGatherer::largest_unit_bytes() const {
  size_t best = 0;
  for (int u = 0; u < static_cast<int>(unit_params_.size()); ++u) best = std::max(best, unit_bytes(u));
  return best;
}

size_t ParameterGatherer::gathered_bound_bytes() const {
  if (kept_units_.empty()) return 2 * largest_unit_bytes();
  size_t bytes = 0;
  for (int u : kept_units_) bytes += unit_bytes(u);
  return bytes;
}

const float* ParameterGatherer::shard_part(nn::ParamRange part) const {
  const float* base = shard_.data<float>();
  return part.size() > 0 ? base + layout_.shard_offset(rank_, part.begin) : base;
}

void ParameterGatherer::begin(const exec::Program& program) {
  drain();
  runs_.clear();
  run_of_.assign(program.actions.size(), -1);
  // Under a pipeline a unit's run spans every action on it in the program; otherwise a run is
  // consecutive actions on one unit.
  std::map<int, int> run_of_unit;
  for (int i = 0; i < static_cast<int>(program.actions.size()); ++i) {
    const exec::Action& a = program.actions[static_cast<size_t>(i)];
    if (a.kind != exec::Action::Kind::Unit) continue;
    if (!kept_units_.empty()) {
      auto [it, fresh] = run_of_unit.emplace(a.unit, static_cast<int>(runs_.size()));
      if (fresh) runs_.push_back({a.unit, i, i});
      runs_[static_cast<size_t>(it->second)].last = i;
      run_of_[static_cast<size_t>(i)] = it->second;
      continue;
    }
    if (!runs_.empty() && runs_.back().unit == a.unit && runs_.back().last == i - 1) {
      runs_.back().last = i;
    } else {
      runs_.push_back({a.unit, i, i});
    }
    run_of_[static_cast<size_t>(i)] = static_cast<int>(runs_.size()) - 1;
  }
}

void ParameterGatherer::post(int run) {
  const UnitParams& up = unit_params_[static_cast<size_t>(runs_[static_cast<size_t>(run)].unit)];
  Gathered g;
  g.gathering = !offloaded_ || alone();
  for (const nn::ParamRange& r : up.ranges) {
    if (!g.gathering) {
      // Only this rank's part is read now; the gathered buffer comes with the gather.
      const nn::ParamRange part = layout_.part(r, rank_);
      // At least one element: a rank with no part of the range still sends from a valid address.
      Tensor mine = Tensor::empty({std::max<int64_t>(part.size(), 1)}, DType::F32, MemoryTag::Params, memory_);
      for (auto& w : offloaded_->read_range(part, mine.data<float>())) g.reads.push_back(std::move(w));
      g.parts.push_back(std::move(mine));
      continue;
    }
    Tensor buffer = Tensor::empty({r.size()}, DType::F32, MemoryTag::Comm, memory_);
    if (offloaded_) {
      // The whole range is this rank's: read it where the unit will read it.
      for (auto& w : offloaded_->read_range(r, buffer.data<float>())) g.reads.push_back(std::move(w));
    } else {
      g.works.push_back(gather_range(comm_, layout_, shard_part(layout_.part(r, rank_)), r, buffer.data<float>()));
    }
    g.buffers.push_back(std::move(buffer));
  }
  slots_.emplace(run, std::move(g));
}

void ParameterGatherer::start_gather(int run) {
  Gathered& g = slots_.at(run);
  if (g.gathering) return;
  wait_all(g.reads);
  const UnitParams& up = unit_params_[static_cast<size_t>(runs_[static_cast<size_t>(run)].unit)];
  for (size_t i = 0; i < up.ranges.size(); ++i) {
    const nn::ParamRange& r = up.ranges[i];
    Tensor buffer = Tensor::empty({r.size()}, DType::F32, MemoryTag::Comm, memory_);
    g.works.push_back(comm_->all_gather(g.parts[i].data<float>(), buffer.data<float>(), layout_.counts(r), DType::F32));
    g.buffers.push_back(std::move(buffer));
  }
  g.gathering = true;
}

void ParameterGatherer::complete(int run) {
  Gathered& g = slots_.at(run);
  if (g.ready) return;
  start_gather(run);
  wait_all(g.reads);
  wait_works(g.works);
  g.parts.clear();
  g.ready = true;
}

void ParameterGatherer::before(const exec::Event& event) {
  const int run = run_of_[static_cast<size_t>(event.index)];
  if (run < 0 || runs_[static_cast<size_t>(run)].first != event.index) return;
  if (!slots_.count(run)) post(run);
  complete(run);
  // Prefetch: the next run's gather moves while this one computes. Offloaded over several ranks,
  // the next run's parts were read while the previous run computed: its gather starts now, and the
  // reads of the run after it.
  const int runs = static_cast<int>(runs_.size());
  if (run + 1 < runs && !slots_.count(run + 1)) post(run + 1);
  if (offloaded_ && !alone()) {
    if (run + 1 < runs) start_gather(run + 1);
    if (run + 2 < runs && !slots_.count(run + 2)) post(run + 2);
  }
}

void ParameterGatherer::after(const exec::Event& event) {
  const int run = run_of_[static_cast<size_t>(event.index)];
  if (run >= 0 && runs_[static_cast<size_t>(run)].last == event.index) slots_.erase(run);
}

void ParameterGatherer::finish(const exec::Program& program) { drain(); }

Tensor ParameterGatherer::working(const nn::Parameter& p, const exec::Event* event) {
  TS_CHECK(event != nullptr, "ZeRO-3: parameter '{}' read outside a program, where no unit is gathered; run the "
           "model through the interpreter, or gather everything with full_parameters()", p.name);
  const int run = run_of_[static_cast<size_t>(event->index)];
  auto it = slots_.find(run);
  TS_CHECK(run >= 0 && it != slots_.end() && it->second.ready,
           "ZeRO-3: parameter '{}' read during {}, when its unit is not gathered", p.name,
           exec::describe(event->action()));
  const UnitParams& up = unit_params_[static_cast<size_t>(runs_[static_cast<size_t>(run)].unit)];
  const auto offset = static_cast<int64_t>(p.offset);
  for (size_t i = 0; i < up.ranges.size(); ++i) {
    const nn::ParamRange& r = up.ranges[i];
    if (offset >= r.begin && offset + p.numel() <= r.end) {
      return it->second.buffers[i].slice(0, offset - r.begin, offset - r.begin + p.numel()).reshape(p.shape);
    }
  }
  TS_FAIL("ZeRO-3: parameter '{}' is not one of the parameters of unit {}, which {} runs", p.name,
          runs_[static_cast<size_t>(run)].unit, exec::describe(event->action()));
}

ParameterGatherer::Full ParameterGatherer::gather_all() {
  Tensor full = Tensor::empty({store_numel_}, DType::F32, MemoryTag::Comm, memory_);
  gather_into(full.data<float>());
  return Full(*this, std::move(full));
}

void ParameterGatherer::gather_into(float* out) {
  drain();
  if (offloaded_) {
    // The whole shard in compute memory at once; checkpoints read and write the model one
    // parameter at a time instead (read_one_at_a_time, write_one_at_a_time).
    OffloadedShard::Works reads = offloaded_->read_range(mine_, out + mine_.begin);
    wait_all(reads);
  } else {
    for (const nn::ParamRange& part : layout_.shards(rank_)) {
      copy_elements(out + part.begin, shard_part(part), part.size());
    }
  }
  if (comm_ != nullptr && comm_->size() > 1) {
    // In place, piece by piece: this rank's part is already where it belongs in the output.
    std::vector<dist::WorkPtr> works;
    for (const nn::ParamRange& piece : layout_.pieces()) {
      const nn::ParamRange mine = layout_.part(piece, rank_);
      works.push_back(comm_->all_gather(out + mine.begin, out + piece.begin, layout_.counts(piece), DType::F32));
    }
    dist::wait_all(works);
  }
}

Tensor ParameterGatherer::Full::weight(const nn::Parameter& p) {
  const auto at = static_cast<int64_t>(p.offset);
  return buffer_.slice(0, at, at + p.numel()).reshape(p.shape);
}

Tensor ParameterGatherer::Full::grad(const nn::Parameter& p) {
  TS_FAIL("ZeRO-3: the gathered parameters have no gradient ('{}'): they are for reading the model", p.name);
}

ParameterGatherer::OneAtATime ParameterGatherer::read_one_at_a_time() {
  TS_CHECK(streams(), "ZeRO-3: the parameters are read one at a time only from a shard in the nvme tier; gather "
           "them with gather_all()");
  // The prefetched gathers are let go, as gather_all does: no unit runs while the model is read.
  drain();
  return OneAtATime(*this);
}

Tensor ParameterGatherer::OneAtATime::weight(const nn::Parameter& p) {
  ParameterGatherer& owner = *owner_;
  Tensor value = Tensor::empty(p.shape, DType::F32, MemoryTag::Comm, owner.memory_);
  float* out = value.data<float>();
  const nn::ParamRange whole = flat_range(p);
  if (owner.alone()) {
    // A parameter is whole parts of the shard (offloaded_shard.h), so it is read as it was written.
    OffloadedShard::Works reads = owner.offloaded_->read_range(whole, out);
    wait_all(reads);
    return value;
  }
  // This rank's part is one part of the shard; it is read where it belongs in the parameter and
  // the other ranks' parts are gathered around it, in place.
  const std::vector<size_t> counts = owner.layout_.counts(whole);
  size_t before = 0;
  for (int r = 0; r < owner.rank_; ++r) before += counts[static_cast<size_t>(r)];
  OffloadedShard::Works reads = owner.offloaded_->read_range(owner.layout_.part(whole, owner.rank_), out + before);
  wait_all(reads);
  owner.comm_->all_gather(out + before, out, counts, DType::F32)->wait();
  return value;
}

Tensor ParameterGatherer::OneAtATime::grad(const nn::Parameter& p) {
  TS_FAIL("ZeRO-3: the parameters read one at a time have no gradient ('{}'): they are for reading the model", p.name);
}

ParameterGatherer::WriteOneAtATime ParameterGatherer::write_one_at_a_time() {
  TS_CHECK(streams(), "ZeRO-3: the parameters are written one at a time only into a shard in the nvme tier; "
           "gather them with gather_all() and write_back()");
  // A prefetched gather would hold values from before the load: no unit runs while it is written.
  drain();
  return WriteOneAtATime(*this);
}

Tensor ParameterGatherer::WriteOneAtATime::take(const nn::Parameter& p) {
  TS_CHECK(taken_ == nullptr, "ZeRO-3: parameter '{}' taken for loading while '{}' is not put back yet; put each "
           "parameter before taking the next", p.name, taken_ == nullptr ? "" : taken_->name);
  value_ = Tensor::empty(p.shape, DType::F32, MemoryTag::Comm, owner_->memory_);
  taken_ = &p;
  return value_;
}

void ParameterGatherer::WriteOneAtATime::put(const nn::Parameter& p) {
  TS_CHECK(taken_ == &p, "ZeRO-3: parameter '{}' put back, but the parameter taken is '{}'", p.name,
           taken_ == nullptr ? "none" : taken_->name);
  // This rank's part of a parameter is one part of the shard (offloaded_shard.h), so it is
  // written as it is read; in one process the part is the whole parameter.
  const nn::ParamRange whole = flat_range(p);
  const nn::ParamRange part = intersect(whole, owner_->mine_);
  OffloadedShard::Works writes =
      owner_->offloaded_->write_range(part, value_.data<float>() + (part.begin - whole.begin));
  taken_ = nullptr;
  wait_all(writes);
  value_ = Tensor();
}

void ParameterGatherer::Full::write_back() { owner_->keep_part_of(buffer_.data<float>()); }

void ParameterGatherer::keep_part_of(const float* values) {
  if (offloaded_) {
    OffloadedShard::Works writes = offloaded_->write_range(mine_, values + mine_.begin);
    wait_all(writes);
    return;
  }
  float* out = shard();
  for (const nn::ParamRange& part : layout_.shards(rank_)) {
    copy_elements(out, values + part.begin, part.size());
    out += part.size();
  }
}

}  // namespace tessera::parallel
