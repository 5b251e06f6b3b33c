#include "parallel/data_parallel.h"

#include "config/parallel_layout.h"

namespace tessera::parallel {

namespace {

int rank_of(dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }
int size_of(dist::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }

}  // namespace

DataParallel::DataParallel(nn::ParameterStore& params, const std::vector<nn::Unit>& units, dist::Communicator* comm,
                           MemoryAccountant& memory, const DataParallelOptions& options,
                           exec::ParameterOwnership& ownership, exec::TransformChain& transforms)
    : params_(params),
      comm_(comm),
      options_(options),
      rank_(rank_of(comm)),
      layout_(params.numel(), size_of(comm)),
      ownership_(ownership),
      transforms_(transforms) {
  TS_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got {}",
           options.zero_stage);
  TS_CHECK(options.bucket_bytes >= 4, "the gradient bucket size must be at least one f32 element, got {} bytes",
           options.bucket_bytes);
  if (options.zero_stage >= 1) ownership.claim(exec::Role::Master, *this);
  if (options.zero_stage >= 2) {
    grad_shard_ = Tensor::zeros({layout_.shard(rank_).size()}, DType::F32, MemoryTag::Grads, memory);
  }
  if (options.zero_stage == 3) {
    gatherer_ = std::make_unique<ParameterGatherer>(params, units, layout_, rank_, comm, memory, ownership);
    transforms.add(exec::TransformSlot::ParameterPlacement, *gatherer_);
  }
  reducer_ = std::make_unique<GradientReducer>(params, units, layout_, rank_, comm, memory, options.zero_stage,
                                               options.bucket_bytes / 4,
                                               grad_shard_.defined() ? grad_shard_.data<float>() : nullptr, ownership);
  transforms.add(exec::TransformSlot::GradientReduction, *reducer_);
}

DataParallel::~DataParallel() {
  transforms_.remove(exec::TransformSlot::GradientReduction);
  ownership_.release(*reducer_);
  ownership_.release(*this);
  if (gatherer_) {
    transforms_.remove(exec::TransformSlot::ParameterPlacement);
    ownership_.release(*gatherer_);
  }
}

nn::ParamRange DataParallel::owned() const {
  return options_.zero_stage == 0 ? nn::ParamRange{0, layout_.numel()} : layout_.shard(rank_);
}

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

void DataParallel::zero_grads() {
  if (grad_shard_.defined()) {
    grad_shard_.fill_zero();
  } else {
    params_.zero_grads();
  }
}

std::vector<optim::Segment> DataParallel::master_segments(std::span<const nn::Parameter* const> params) {
  TS_CHECK(static_cast<int>(params.size()) == params_.size(), "ZeRO shards the whole flat buffer: it must own the "
           "master copy of every parameter, not {} of {}", params.size(), params_.size());
  // The shards of one parameter are spread over the dp group: its norm sums over dp.
  const uint32_t over_dp = 1u << static_cast<int>(config::MeshDim::DP);
  return optim::segments_of_range(params_, owned(), values_of_owned(), grads_of_owned(), over_dp);
}

void DataParallel::after_optimizer_step() {
  if (options_.zero_stage == 1 || options_.zero_stage == 2) {
    if (comm_ != nullptr && comm_->size() > 1) {
      // In place: each rank's updated shard is already where it belongs in the full buffer.
      float* values = params_.flat_values().data<float>();
      comm_->all_gather(values + owned().begin, values, layout_.counts({0, layout_.numel()}), DType::F32)->wait();
    }
  }
}

DataParallel::FullParameters DataParallel::full_parameters() {
  if (!gatherer_) return FullParameters(params_, std::nullopt);
  return FullParameters(params_, gatherer_->gather_all());
}

}  // namespace tessera::parallel
