#include "parallel/data_parallel.h"

#include <cmath>

#include "kernels/cpu/grad_norm.h"
#include "parallel/rank_sum.h"

namespace tessera::parallel {

namespace {

int rank_of(dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }
int size_of(dist::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }

nn::ParamRange owned_range(int stage, const ShardLayout& layout, int rank) {
  return stage == 0 ? nn::ParamRange{0, layout.numel()} : layout.shard(rank);
}

}  // namespace

DataParallel::DataParallel(nn::ParameterStore& params, const std::vector<nn::Unit>& units, dist::Communicator* comm,
                           MemoryAccountant& memory, const DataParallelOptions& options,
                           const optim::AdamWConfig& adam)
    : params_(params),
      comm_(comm),
      options_(options),
      rank_(rank_of(comm)),
      layout_(params.numel(), size_of(comm)),
      optimizer_(params, memory, adam, owned_range(options.zero_stage, layout_, rank_)) {
  TS_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got {}",
           options.zero_stage);
  TS_CHECK(options.bucket_bytes >= 4, "the gradient bucket size must be at least one f32 element, got {} bytes",
           options.bucket_bytes);
  if (options.zero_stage >= 2) {
    grad_shard_ = Tensor::zeros({layout_.shard(rank_).size()}, DType::F32, MemoryTag::Grads, memory);
  }
  if (options.zero_stage == 3) {
    gatherer_ = std::make_unique<ParameterGatherer>(params, units, layout_, rank_, comm, memory);
  }
  reducer_ = std::make_unique<GradientReducer>(params, units, layout_, rank_, comm, memory, options.zero_stage,
                                               options.bucket_bytes / 4,
                                               grad_shard_.defined() ? grad_shard_.data<float>() : nullptr);
}

DataParallel::~DataParallel() = default;

size_t DataParallel::comm_bound_bytes() const {
  return reducer_->storage_bound_bytes() + (gatherer_ ? 2 * gatherer_->largest_unit_bytes() : 0);
}

float* DataParallel::values_of_owned() {
  if (gatherer_) return gatherer_->shard();
  return params_.flat_values().data<float>() + owned().begin;
}

float* DataParallel::grads_of_owned() {
  if (grad_shard_.defined()) return grad_shard_.data<float>();
  return params_.flat_grads().data<float>() + owned().begin;
}

void DataParallel::begin_step() {
  if (grad_shard_.defined()) {
    grad_shard_.fill_zero();
  } else {
    params_.zero_grads();
  }
}

void DataParallel::begin_microbatch(int micro, int micros) {
  TS_CHECK(micro >= 0 && micro < micros, "microbatch {} of {}", micro, micros);
  // Stages 0 and 1 accumulate locally and reduce once, on the last microbatch.
  reducer_->begin_microbatch(micro + 1 == micros);
  if (gatherer_) gatherer_->begin_pass(true);
}

void DataParallel::end_microbatch() { reducer_->finish(); }

void DataParallel::begin_evaluation() {
  if (gatherer_) gatherer_->begin_pass(false);
}

double DataParallel::clip_grad_norm(double max_norm) {
  if (options_.zero_stage == 0) {
    // Every rank holds the whole reduced gradient: the norm needs no communication.
    const std::pair<float*, size_t> all{params_.flat_grads().data<float>(), static_cast<size_t>(params_.numel())};
    return kernels::clip_grad_norm(std::span(&all, 1), max_norm);
  }
  float* g = grads_of_owned();
  const auto n = static_cast<size_t>(owned().size());
  const double local = kernels::sum_of_squares(g, n);
  const double norm = std::sqrt(sum_over_ranks(comm_, std::span(&local, 1))[0]);
  if (!(max_norm > 0) || !std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);  // as kernels::clip_grad_norm, so the bits agree
  if (coef >= 1.0) return norm;
  const auto s = static_cast<float>(coef);
  for (size_t i = 0; i < n; ++i) g[i] *= s;
  return norm;
}

void DataParallel::optimizer_step(float lr) {
  optimizer_.step(lr, values_of_owned(), grads_of_owned());
  if (options_.zero_stage == 1 || options_.zero_stage == 2) {
    if (comm_ != nullptr && comm_->size() > 1) {
      // In place: each rank's updated shard is already where it belongs in the full buffer.
      float* values = params_.flat_values().data<float>();
      comm_->all_gather(values + owned().begin, values, layout_.counts({0, layout_.numel()}), DType::F32)->wait();
    }
  }
}

DataParallel::FullParameters DataParallel::full_parameters() {
  if (!gatherer_) return FullParameters(std::nullopt);
  return FullParameters(gatherer_->gather_all());
}

void DataParallel::before_forward(int unit) {
  if (gatherer_) gatherer_->before(unit, false);
}

void DataParallel::after_forward(int unit) {
  if (gatherer_) gatherer_->after(unit, false);
}

void DataParallel::before_backward(int unit) {
  if (gatherer_) gatherer_->before(unit, true);
  reducer_->before_backward(unit);
}

void DataParallel::after_backward(int unit) {
  reducer_->after_backward(unit);
  if (gatherer_) gatherer_->after(unit, true);
}

}  // namespace tessera::parallel
