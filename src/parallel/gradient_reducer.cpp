#include "parallel/gradient_reducer.h"

#include <algorithm>

namespace tessera::parallel {

GradientReducer::GradientReducer(nn::ParameterStore& params, const std::vector<nn::Unit>& units,
                                 const ShardLayout& layout, int rank, dist::Communicator* comm,
                                 MemoryAccountant& memory, int stage, int64_t bucket_elems, float* grad_shard)
    : params_(params),
      layout_(layout),
      rank_(rank),
      comm_(comm),
      memory_(memory),
      stage_(stage),
      grad_shard_(grad_shard),
      buckets_(plan_buckets(units, bucket_elems)) {
  for (const Bucket& b : buckets_) {
    auto& inside = bucket_params_.emplace_back();
    for (auto& p : params.all()) {
      const auto begin = static_cast<int64_t>(p.offset);
      if (begin >= b.range.begin && begin + p.numel() <= b.range.end && p.numel() > 0) inside.push_back(&p);
    }
  }
  if (sharded_grads()) {
    // From here on gradients exist only in bucket storage while backward fills it.
    for (auto& p : params.all()) p.grad = Tensor();
    params.flat_grads() = Tensor();
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
}

void GradientReducer::begin_microbatch(bool reduce) {
  TS_CHECK(in_flight_.empty() && filling_.empty(), "gradient reduction: a microbatch began before the last finished");
  reduce_ = reduce || sharded_grads();
}

size_t GradientReducer::storage_bound_bytes() const {
  if (!sharded_grads()) return 0;
  int64_t largest = 0;
  for (const Bucket& b : buckets_) largest = std::max(largest, b.range.size());
  // Buckets allocated and not yet complete while unit u runs backward.
  size_t filling = 0;
  const int units = buckets_.empty() ? 0 : buckets_.front().first_unit + 1;
  for (int u = 0; u < units; ++u) {
    size_t n = 0;
    for (const Bucket& b : buckets_) n += b.first_unit >= u && b.complete_unit <= u;
    filling = std::max(filling, n);
  }
  return (kMaxInFlight + filling) * sizeof(float) * static_cast<size_t>(largest);
}

void GradientReducer::allocate(int bucket) {
  while (!in_flight_.empty() && (in_flight_.front().work == nullptr || in_flight_.front().work->is_completed())) {
    complete_oldest();  // frees storage early when the communicator is ahead
  }
  while (in_flight_.size() >= kMaxInFlight) complete_oldest();
  const Bucket& b = buckets_[static_cast<size_t>(bucket)];
  Tensor storage = Tensor::zeros({b.range.size()}, DType::F32, MemoryTag::Comm, memory_);
  for (nn::Parameter* p : bucket_params_[static_cast<size_t>(bucket)]) {
    const int64_t at = static_cast<int64_t>(p->offset) - b.range.begin;
    p->grad = storage.slice(0, at, at + p->numel()).reshape(p->shape);
  }
  filling_.emplace(bucket, std::move(storage));
}

void GradientReducer::before_backward(int unit) {
  if (!sharded_grads()) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].first_unit == unit) allocate(static_cast<int>(b));
  }
}

void GradientReducer::after_backward(int unit) {
  if (!reduce_) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].complete_unit == unit) post(static_cast<int>(b));
  }
}

void GradientReducer::post(int bucket) {
  const Bucket& b = buckets_[static_cast<size_t>(bucket)];
  const bool alone = comm_ == nullptr || comm_->size() == 1;
  InFlight f;
  f.bucket = bucket;
  float* data = nullptr;
  if (sharded_grads()) {
    f.storage = std::move(filling_.at(bucket));
    filling_.erase(bucket);
    for (nn::Parameter* p : bucket_params_[static_cast<size_t>(bucket)]) p->grad = Tensor();
    data = f.storage.data<float>();
  } else {
    data = params_.flat_grads().data<float>() + b.range.begin;
  }
  if (!alone) {
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

void GradientReducer::complete(InFlight& f) {
  if (f.work) f.work->wait();
  if (!sharded_grads()) return;
  const Bucket& b = buckets_[static_cast<size_t>(f.bucket)];
  const nn::ParamRange part = layout_.part(b.range, rank_);
  const float* src = f.storage.data<float>() + (part.begin - b.range.begin);
  float* dst = grad_shard_ + (part.begin - layout_.shard(rank_).begin);
  for (int64_t i = 0; i < part.size(); ++i) dst[i] += src[i];
}

void GradientReducer::complete_oldest() {
  complete(in_flight_.front());
  in_flight_.pop_front();  // frees the bucket's storage
}

void GradientReducer::finish() {
  while (!in_flight_.empty()) complete_oldest();
  TS_CHECK(filling_.empty(), "gradient reduction: {} bucket(s) were never completed by backward", filling_.size());
}

}  // namespace tessera::parallel
