#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/element.h"
#include "kernels/cpu/grad_norm.h"

namespace tessera::parallel {

GradientReducer::GradientReducer(nn::ParameterStore& params, const std::vector<nn::Unit>& units,
                                 const ShardLayout& layout, int rank, dist::Communicator* comm,
                                 MemoryAccountant& memory, int stage, int64_t bucket_elems, float* grad_shard,
                                 exec::ParameterOwnership& ownership, std::span<const int> ids,
                                 OffloadedGradients* offloaded)
    : params_(params),
      layout_(layout),
      rank_(rank),
      comm_(comm),
      memory_(memory),
      stage_(stage),
      grad_shard_(grad_shard),
      buckets_(plan_buckets(units, bucket_elems, layout.pieces())),
      offloaded_(offloaded) {
  TS_CHECK(offloaded == nullptr || stage == 3, "gradients in the nvme tier are ZeRO-3's shard, not stage {}'s", stage);
  bucket_of_.assign(static_cast<size_t>(params.size()), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (const auto& p : params.all()) {
      const auto begin = static_cast<int64_t>(p.offset);
      if (begin >= buckets_[b].range.begin && begin + p.numel() <= buckets_[b].range.end) {
        bucket_of_[static_cast<size_t>(p.id)] = static_cast<int>(b);
      }
    }
  }
  writes_bucket_.assign(units.size(), std::vector<bool>(buckets_.size(), false));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int u : buckets_[b].writers) writes_bucket_[static_cast<size_t>(u)][b] = true;
  }
  if (sharded_grads()) {
    // From here on gradients exist only in bucket storage while the program fills it.
    ownership.claim(exec::Role::Gradient, *this, ids);
    params.release_grads("ZeRO-2/3 (bucket storage per microbatch, then this rank's gradient shard)");
  }
}

GradientReducer::~GradientReducer() {
  std::vector<dist::WorkPtr> works;
  for (auto& f : in_flight_) {
    if (f.work) works.push_back(f.work);
  }
  try {
    dist::wait_all(works);  // no buffer may be freed while the communicator still writes into it
  } catch (...) {
    // Destruction during an error: the job is ending anyway; do not throw from a destructor.
  }
  for (Writing& w : writing_) {
    try {
      wait_all(w.writes);  // nor while the copy engine reads from it
    } catch (...) {
    }
  }
}

size_t GradientReducer::storage_bound_bytes() const {
  if (!sharded_grads()) return 0;
  int64_t largest = 0;
  for (const Bucket& b : buckets_) largest = std::max(largest, b.range.size());
  // Buckets allocated and not yet complete while unit u runs backward.
  size_t filling = 0;
  const int units = static_cast<int>(writes_bucket_.size());
  for (int u = 0; u < units; ++u) {
    size_t n = 0;
    for (const Bucket& b : buckets_) n += b.first_unit >= u && b.complete_unit <= u;
    filling = std::max(filling, n);
  }
  return (kMaxInFlight + filling) * sizeof(float) * static_cast<size_t>(largest);
}

std::vector<BucketShape> GradientReducer::bucket_shapes() const {
  std::vector<BucketShape> shapes;
  for (const Bucket& b : buckets_) {
    BucketShape shape;
    shape.elements = b.range.size();
    for (const nn::Parameter& p : params_.all()) {
      const auto begin = static_cast<int64_t>(p.offset);
      if (p.shape.size() < 2 || begin < b.range.begin || begin + p.numel() > b.range.end) continue;
      // A stack of matrices (an MoE layer's experts, [E, F, C]) is E matrices of its last two
      // dimensions: each expert's own, as PowerSGD approximates a layer's weight.
      const int64_t rows = p.shape[p.shape.size() - 2], cols = p.shape.back();
      for (int64_t at = begin; at < begin + p.numel(); at += rows * cols) {
        shape.matrices.push_back({at - b.range.begin, rows, cols});
      }
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

void GradientReducer::set_message_dtype(DType dtype) {
  TS_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
           "gradient reduction messages are f32, bf16 or f16, not {}", dtype_name(dtype));
  message_dtype_ = dtype;
}

void GradientReducer::set_reducing(bool reducing) {
  TS_CHECK(reducing || stage_ == 0, "gradient reduction: only plain data parallelism can leave each rank its own "
           "gradient (ZeRO-{} keeps only this rank's part of the reduced one)", stage_);
  reducing_ = reducing;
}

void GradientReducer::begin(const exec::Program& program) {
  TS_CHECK(in_flight_.empty() && filling_.empty(), "gradient reduction: a program began before the last finished");
  compressed_non_finite_ = false;
  open_before_.clear();
  post_after_.clear();
  if (!program.training) return;
  if (compressor_ != nullptr) compressor_->begin_step();
  std::map<Window, std::pair<int, int>> span;  // window -> first and last writing action
  for (int i = 0; i < static_cast<int>(program.actions.size()); ++i) {
    const exec::Action& a = program.actions[static_cast<size_t>(i)];
    if (a.kind != exec::Action::Kind::Unit || !exec::writes_gradients(a.phase)) continue;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (!writes_bucket_[static_cast<size_t>(a.unit)][b]) continue;
      const Window w{static_cast<int>(b), sharded_grads() ? a.microbatch : -1 - a.batch};
      auto [it, fresh] = span.try_emplace(w, i, i);
      if (!fresh) it->second.second = i;
    }
  }
  final_window_.clear();
  std::map<int, int> final_post;  // bucket -> its last window's posting action
  for (const auto& [w, first_last] : span) {
    if (sharded_grads()) open_before_[first_last.first].push_back(w);
    post_after_[first_last.second].push_back(w);
    auto [it, fresh] = final_post.try_emplace(w.first, first_last.second);
    if (fresh || first_last.second >= it->second) {
      it->second = first_last.second;
      final_window_[w.first] = w.second;
    }
  }
}

void GradientReducer::before(const exec::Event& event) {
  auto it = open_before_.find(event.index);
  if (it == open_before_.end()) return;
  for (const Window& w : it->second) allocate(w, event.index);
}

void GradientReducer::after(const exec::Event& event) {
  auto it = post_after_.find(event.index);
  if (it == post_after_.end()) return;
  for (const Window& w : it->second) post(w, event.index);
}

void GradientReducer::finish(const exec::Program& program) {
  while (!in_flight_.empty()) complete_oldest();
  while (!writing_.empty()) finish_oldest_write();
  TS_CHECK(filling_.empty(), "gradient reduction: {} bucket(s) were never completed by the program", filling_.size());
}

Tensor GradientReducer::gradient_target(const nn::Parameter& p, const exec::Event* event) {
  TS_CHECK(event != nullptr, "ZeRO-{}: the gradient of '{}' is written outside a program; run the model through "
           "the interpreter", stage_, p.name);
  const Window w{bucket_of_[static_cast<size_t>(p.id)], event->microbatch};
  auto it = filling_.find(w);
  TS_CHECK(it != filling_.end(), "ZeRO-{}: the gradient bucket of '{}' is not open during {}", stage_, p.name,
           exec::describe(event->action()));
  const int64_t at = static_cast<int64_t>(p.offset) - buckets_[static_cast<size_t>(w.first)].range.begin;
  return it->second.slice(0, at, at + p.numel()).reshape(p.shape);
}

void GradientReducer::allocate(Window w, int action) {
  // A landing that runs a collective (the sum over tp under sequence parallelism) must come at the
  // same action on every rank of that group, so it does not wait on how soon this rank's
  // communicator finished.
  const bool early = offloaded_ == nullptr || !offloaded_->lands_collectively();
  while (!in_flight_.empty() &&
         (in_flight_.front().work == nullptr || (early && in_flight_.front().work->is_completed()) ||
          in_flight_.front().posted_after < action - 1)) {
    complete_oldest();  // frees storage early when the communicator is ahead
  }
  while (in_flight_.size() >= kMaxInFlight) complete_oldest();
  const auto done = [](const Writing& w) {
    return std::all_of(w.writes.begin(), w.writes.end(), [](const auto& c) { return c->is_completed(); });
  };
  while (!writing_.empty() && (done(writing_.front()) || writing_.front().posted_after < action - 1)) {
    finish_oldest_write();
  }
  const Bucket& b = buckets_[static_cast<size_t>(w.first)];
  filling_.emplace(w, Tensor::zeros({b.range.size()}, DType::F32, MemoryTag::Comm, memory_));
}

void GradientReducer::post(Window w, int action) {
  const Bucket& b = buckets_[static_cast<size_t>(w.first)];
  const bool alone = comm_ == nullptr || comm_->size() == 1 || !reducing_;
  InFlight f;
  f.window = w;
  f.posted_after = action;
  float* data = nullptr;
  if (sharded_grads()) {
    auto it = filling_.find(w);
    TS_CHECK(it != filling_.end(), "gradient reduction: bucket {} was completed before it was opened", w.first);
    f.storage = std::move(it->second);
    filling_.erase(it);
    data = f.storage.data<float>();
  } else {
    data = params_.flat_grads().data<float>() + b.range.begin;
  }
  if (!alone && compressor_ != nullptr && compressor_->active(warmup_steps_)) {
    // Squares of finite floats cannot overflow a double: a non-finite sum is a non-finite element.
    compressed_non_finite_ =
        compressed_non_finite_ || !std::isfinite(kernels::sum_of_squares(data, static_cast<size_t>(b.range.size())));
    // The whole decompressed sum lands in the bucket; under ZeRO this rank keeps its part of it.
    compressor_->reduce(w.first, std::span(data, static_cast<size_t>(b.range.size())), *comm_);
  } else if (!alone && message_dtype_ != DType::F32) {
    f.data = data;
    post_low_precision(f, b);
  } else if (!alone) {
    if (stage_ == 0) {
      f.work = comm_->all_reduce(data, static_cast<size_t>(b.range.size()), DType::F32, dist::ReduceOp::Sum);
    } else {
      // In place: the output is this rank's chunk inside the bucket.
      const nn::ParamRange part = layout_.part(b.range, rank_);
      f.work = comm_->reduce_scatter(data, data + (part.begin - b.range.begin), layout_.counts(b.range), DType::F32,
                                     dist::ReduceOp::Sum);
    }
  }
  in_flight_.push_back(std::move(f));
}

void GradientReducer::post_low_precision(InFlight& f, const Bucket& b) {
  const std::vector<size_t> counts = layout_.counts(b.range);
  const auto size = static_cast<size_t>(b.range.size());
  const size_t mine = counts[static_cast<size_t>(rank_)];
  f.sent = Tensor::empty({static_cast<int64_t>(size)}, message_dtype_, MemoryTag::Comm, memory_);
  f.received = Tensor::empty({static_cast<int64_t>(mine * counts.size())}, message_dtype_, MemoryTag::Comm, memory_);
  if (message_dtype_ == DType::BF16) {
    kernels::narrow<bf16>(f.sent.data<bf16>(), f.data, size);
  } else {
    kernels::narrow<f16>(f.sent.data<f16>(), f.data, size);
  }
  const std::vector<size_t> from_each(counts.size(), mine);
  f.work = comm_->all_to_all(f.sent.raw(), counts, f.received.raw(), from_each, message_dtype_);
}

void GradientReducer::complete_low_precision(InFlight& f) {
  f.work->wait();
  const Bucket& b = buckets_[static_cast<size_t>(f.window.first)];
  const nn::ParamRange part = layout_.part(b.range, rank_);
  const auto mine = static_cast<size_t>(part.size());
  const size_t members = static_cast<size_t>(comm_->size());
  const bool is_bf16 = message_dtype_ == DType::BF16;
  // Every member's chunk, in rank order, summed in f32 from zero: the same order on every rank, so a
  // value replicated by the all-gather below is the same everywhere. The sum lands in this rank's
  // part of the bucket, whose own values the all-to-all already carried, in one pass a chunk.
  float* my_part = f.data + (part.begin - b.range.begin);
  std::fill(my_part, my_part + mine, 0.0f);
  for (size_t r = 0; r < members; ++r) {
    const char* from = static_cast<const char*>(f.received.raw()) + r * mine * dtype_size(message_dtype_);
    if (is_bf16) {
      kernels::add_widened<bf16>(my_part, reinterpret_cast<const bf16*>(from), mine);
    } else {
      kernels::add_widened<f16>(my_part, reinterpret_cast<const f16*>(from), mine);
    }
  }
  if (stage_ == 0) {
    // Every rank needs the whole sum: this rank's part, rounded once (into the chunks just summed),
    // gathered from every member.
    const auto size = static_cast<size_t>(b.range.size());
    if (is_bf16) {
      kernels::narrow<bf16>(f.received.data<bf16>(), my_part, mine);
    } else {
      kernels::narrow<f16>(f.received.data<f16>(), my_part, mine);
    }
    comm_->all_gather(f.received.raw(), f.sent.raw(), layout_.counts(b.range), message_dtype_)->wait();
    if (is_bf16) {
      kernels::widen<bf16>(f.data, f.sent.data<bf16>(), size);
    } else {
      kernels::widen<f16>(f.data, f.sent.data<f16>(), size);
    }
  }
  // Sharded (stages 1-3): this rank keeps its part's f32 sums; the rest of the bucket is not read.
  f.sent = Tensor();
  f.received = Tensor();
}

void GradientReducer::complete(InFlight& f) {
  if (f.received.defined()) {
    complete_low_precision(f);
  } else if (f.work) {
    f.work->wait();
  }
  if (!sharded_grads()) return;
  const Bucket& b = buckets_[static_cast<size_t>(f.window.first)];
  const nn::ParamRange part = layout_.part(b.range, rank_);
  if (part.size() == 0) return;
  if (offloaded_ != nullptr) {
    float* reduced = f.storage.data<float>() + (part.begin - b.range.begin);
    const bool final = final_window_.at(f.window.first) == f.window.second;
    writing_.push_back({offloaded_->land(part, reduced, final), std::move(f.storage), f.posted_after});
    return;
  }
  const float* src = f.storage.data<float>() + (part.begin - b.range.begin);
  float* dst = grad_shard_ + layout_.shard_offset(rank_, part.begin);
  for (int64_t i = 0; i < part.size(); ++i) dst[i] += src[i];
}

void GradientReducer::complete_oldest() {
  complete(in_flight_.front());
  in_flight_.pop_front();  // frees the bucket's storage, unless a write to the nvme tier still reads it
}

void GradientReducer::finish_oldest_write() {
  Writing w = std::move(writing_.front());
  writing_.pop_front();
  wait_all(w.writes);
}

}  // namespace tessera::parallel
