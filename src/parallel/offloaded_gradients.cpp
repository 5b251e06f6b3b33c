#include "parallel/offloaded_gradients.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/grad_norm.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

OffloadedGradients::OffloadedGradients(memory::NvmeStore& store, const nn::ParameterStore& params, nn::ParamRange mine,
                                       std::span<const optim::Segment> segments, MemoryAccountant& memory,
                                       dist::Communicator* sequence_parallel)
    : shard_(store, params, mine), memory_(memory), sequence_parallel_(sequence_parallel) {
  if (sequence_parallel_ != nullptr) {
    for (const optim::Segment& s : segments) {
      if (!s.param->spec.replicated_over(config::MeshDim::TP) || s.size() == 0) continue;
      const auto begin = static_cast<int64_t>(s.param->offset) + s.begin;
      if (!replicated_.empty() && replicated_.back().end == begin) {
        replicated_.back().end = begin + s.size();
      } else {
        replicated_.push_back({begin, begin + s.size()});
      }
    }
  }
  int64_t owned = 0;
  for (size_t i = 0; i < segments.size();) {
    size_t j = i + 1;
    int64_t n = segments[i].size();
    while (j < segments.size() && segments[j].sharded_over == segments[i].sharded_over) n += segments[j++].size();
    Run run{owned, n, {}};
    const auto chunk = static_cast<int64_t>(kernels::square_chunk_elements(static_cast<size_t>(n)));
    for (size_t k = 0; k < kernels::kSquareChunks; ++k) {
      const int64_t lo = std::min(n, static_cast<int64_t>(k) * chunk), hi = std::min(n, lo + chunk);
      run.chunks.push_back({mine.begin + owned + lo, mine.begin + owned + hi, 0, 0.0, Tensor()});
    }
    runs_.push_back(std::move(run));
    owned += n;
    i = j;
  }
  TS_CHECK(owned == mine.size(), "ZeRO-3's offloaded gradients: the segments cover {} elements of a shard of {}",
           owned, mine.size());
  written_.assign(shard_.parts(), false);
  last_writes_.resize(shard_.parts());
}

void OffloadedGradients::begin_step() {
  for (Works& w : last_writes_) {
    TS_CHECK(std::all_of(w.begin(), w.end(), [](const auto& work) { return work->is_completed(); }),
             "ZeRO-3's offloaded gradients: a step began while a write of the last one was still running");
    w.clear();
  }
  std::fill(written_.begin(), written_.end(), false);
  for (Run& run : runs_) {
    for (Chunk& c : run.chunks) {
      c.landed = 0;
      c.squares = 0.0;
      c.gathered = Tensor();
    }
  }
  scales_.clear();
}

OffloadedGradients::Works OffloadedGradients::land(nn::ParamRange part, float* reduced, bool final) {
  if (part.size() == 0) return {};
  const auto [first, last] = shard_.parts_of(part);
  const bool fresh = !written_[first];
  for (size_t i = first; i < last; ++i) {
    TS_CHECK(written_[i] != fresh, "ZeRO-3's offloaded gradients: [{}, {}) lands partly over what an earlier window "
             "wrote", part.begin, part.end);
  }
  const auto n = static_cast<size_t>(part.size());
  if (fresh) {
    // What the zeroed shard would hold: 0 + g (a -0 becomes +0).
    for (size_t i = 0; i < n; ++i) reduced[i] = 0.0f + reduced[i];
  } else {
    // An earlier microbatch's window wrote it: read back and add, in the caller's buffer (the sum
    // is the shard's sum + g: addition commutes bit for bit).
    for (size_t i = first; i < last; ++i) wait_all(last_writes_[i]);
    Tensor earlier = Tensor::empty({part.size()}, DType::F32, MemoryTag::Grads, memory_);
    const float* sum = earlier.data<float>();
    Works reads = shard_.read_range(part, earlier.data<float>());
    wait_all(reads);
    for (size_t i = 0; i < n; ++i) reduced[i] = sum[i] + reduced[i];
  }
  if (final) {
    sum_replicated(part, reduced);
    add_squares(part, reduced);
  }
  Works writes = shard_.write_range(part, reduced);
  for (size_t i = first; i < last; ++i) {
    written_[i] = true;
    last_writes_[i] = writes;
  }
  return writes;
}

void OffloadedGradients::sum_replicated(nn::ParamRange part, float* values) {
  if (sequence_parallel_ == nullptr) return;
  // Packed into one message, as TensorParallel::finish packs the shard's in memory.
  std::vector<nn::ParamRange> ranges;
  size_t count = 0;
  for (const nn::ParamRange& r : replicated_) {
    const nn::ParamRange common = intersect(part, r);
    if (common.size() == 0) continue;
    ranges.push_back(common);
    count += static_cast<size_t>(common.size());
  }
  if (ranges.empty()) return;
  std::vector<float> packed;
  packed.reserve(count);
  for (const nn::ParamRange& r : ranges) {
    const float* from = values + (r.begin - part.begin);
    packed.insert(packed.end(), from, from + r.size());
  }
  sequence_parallel_->all_reduce(packed.data(), packed.size(), DType::F32, dist::ReduceOp::Sum)->wait();
  size_t at = 0;
  for (const nn::ParamRange& r : ranges) {
    std::copy_n(packed.data() + at, r.size(), values + (r.begin - part.begin));
    at += static_cast<size_t>(r.size());
  }
}

void OffloadedGradients::add_squares(nn::ParamRange part, const float* values) {
  const int64_t origin = shard_.range().begin;
  for (Run& run : runs_) {
    if (origin + run.first + run.count <= part.begin) continue;
    if (origin + run.first >= part.end) break;
    for (Chunk& c : run.chunks) {
      const nn::ParamRange common = intersect(part, {c.begin, c.end});
      if (common.size() == 0) continue;
      const float* from = values + (common.begin - part.begin);
      if (common.size() == c.end - c.begin) {
        c.squares = kernels::sum_of_squares_chunk(from, static_cast<size_t>(common.size()));
        c.landed = common.size();
        continue;
      }
      if (!c.gathered.defined()) c.gathered = Tensor::zeros({c.end - c.begin}, DType::F32, MemoryTag::Grads, memory_);
      std::memcpy(c.gathered.data<float>() + (common.begin - c.begin), from, sizeof(float) * common.size());
      c.landed += common.size();
      if (c.landed == c.end - c.begin) {
        c.squares = kernels::sum_of_squares_chunk(c.gathered.data<float>(), static_cast<size_t>(c.landed));
        c.gathered = Tensor();
      }
    }
  }
}

double OffloadedGradients::squares(int64_t first, int64_t count) {
  auto run = std::find_if(runs_.begin(), runs_.end(), [&](const Run& r) { return r.first == first; });
  TS_CHECK(run != runs_.end() && run->count == count, "ZeRO-3's offloaded gradients: no run of {} elements starts at "
           "owned element {}; the norm's segments are not the shard's", count, first);
  double total = 0;
  for (Chunk& c : run->chunks) {
    // Elements no window wrote are zeros, as in the zeroed shard.
    if (c.landed < c.end - c.begin && c.gathered.defined()) {
      c.squares = kernels::sum_of_squares_chunk(c.gathered.data<float>(), static_cast<size_t>(c.end - c.begin));
      c.gathered = Tensor();
    }
    total += c.squares;
  }
  return total;
}

OffloadedGradients::Works OffloadedGradients::read(int64_t first, int64_t count, float* into) {
  const nn::ParamRange range{shard_.range().begin + first, shard_.range().begin + first + count};
  Works works;
  if (range.size() == 0) return works;
  const auto [begin, end] = shard_.parts_of(range);
  for (size_t i = begin; i < end; ++i) {
    const nn::ParamRange part = shard_.part(i);
    float* to = into + (part.begin - range.begin);
    if (!written_[i]) {
      std::fill(to, to + part.size(), 0.0f);
      continue;
    }
    for (auto& w : shard_.read_range(part, to)) works.push_back(std::move(w));
  }
  return works;
}

}  // namespace tessera::parallel
