#include "parallel/data_parallel.h"

#include <algorithm>

#include "config/parallel_layout.h"

namespace tessera::parallel {

namespace {

int rank_of(dist::Communicator* comm) { return comm == nullptr ? 0 : comm->rank(); }
int size_of(dist::Communicator* comm) { return comm == nullptr ? 1 : comm->size(); }

exec::TransformSlot placement_slot(config::MeshDim group) {
  return group == config::MeshDim::DP ? exec::TransformSlot::ParameterPlacement
                                      : exec::TransformSlot::ExpertParameterPlacement;
}

exec::TransformSlot reduction_slot(config::MeshDim group) {
  TS_CHECK(group == config::MeshDim::DP || group == config::MeshDim::EDP,
           "data parallelism runs over the dp or the edp group, not {}", config::mesh_dim_name(group));
  return group == config::MeshDim::DP ? exec::TransformSlot::GradientReduction
                                      : exec::TransformSlot::ExpertGradientReduction;
}

}  // namespace

DataParallel::DataParallel(nn::ParameterStore& params, const std::vector<nn::Unit>& units, dist::Communicator* comm,
                           MemoryAccountant& memory, const DataParallelOptions& options,
                           exec::ParameterOwnership& ownership, exec::TransformChain& transforms)
    : params_(params),
      comm_(comm),
      options_(options),
      rank_(rank_of(comm)),
      layout_(options.domain.empty() ? ShardLayout(params.numel(), size_of(comm))
                                     : ShardLayout(options.domain, size_of(comm))),
      ownership_(ownership),
      transforms_(transforms) {
  TS_CHECK(options.zero_stage >= 0 && options.zero_stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got {}",
           options.zero_stage);
  TS_CHECK(options.bucket_bytes >= 4, "the gradient bucket size must be at least one f32 element, got {} bytes",
           options.bucket_bytes);
  for (const nn::Parameter& p : params.all()) {
    const auto begin = static_cast<int64_t>(p.offset);
    bool inside = false, crossing = false;
    for (const nn::ParamRange& piece : layout_.pieces()) {
      const int64_t common = intersect(piece, {begin, begin + p.numel()}).size();
      inside |= common == p.numel();
      crossing |= common > 0 && common < p.numel();
    }
    TS_CHECK(!crossing, "data parallelism: parameter '{}' lies partly inside the reduced domain", p.name);
    if (inside || p.numel() == 0) domain_ids_.push_back(p.id);
  }
  if (options.zero_stage >= 1) ownership.claim(exec::Role::Master, *this, domain_ids_);
  TS_CHECK(options.offload_params == nullptr || options.zero_stage == 3,
           "memory.offload_params moves ZeRO-3's parameter shards; set parallel.zero_stage = 3 (at dp 1 the shard is "
           "the whole model), not {}", options.zero_stage);
  // The whole values go before the gradient shard comes: a model near the size of RAM has room for
  // one of the two at a time.
  if (options.zero_stage == 3) {
    // Under expert parallelism the experts' gatherer answers for its domain and leaves the store's
    // values to the dense one, built after it, which answers for every other parameter.
    GatherScope scope;
    if (options.group == config::MeshDim::EDP) {
      scope.working_ids = domain_ids_;
      scope.releases_store = false;
    } else if (!options.working_answered_elsewhere.empty()) {
      const std::vector<int>& elsewhere = options.working_answered_elsewhere;
      for (const nn::Parameter& p : params.all()) {
        if (std::find(elsewhere.begin(), elsewhere.end(), p.id) == elsewhere.end()) scope.working_ids.push_back(p.id);
      }
    }
    gatherer_ = std::make_unique<ParameterGatherer>(params, units, layout_, rank_, comm, memory, ownership,
                                                    options.offload_params, options.kept_units, scope);
    transforms.add(placement_slot(options.group), *gatherer_);
  }
  if (options.offload_params != nullptr) {
    std::vector<optim::Segment> segments;
    for (const nn::ParamRange& part : owned()) {
      for (const optim::Segment& s : optim::segments_of_range(params_, part, nullptr, nullptr, over_this_group())) {
        segments.push_back(s);
      }
    }
    const std::vector<nn::ParamRange> shard = layout_.shards(rank_);
    TS_CHECK(shard.size() == 1, "ZeRO-3's gradients in the nvme tier: the shard is one range, not {}", shard.size());
    offloaded_grads_ = std::make_unique<OffloadedGradients>(*options.offload_params, params, shard.front(), segments,
                                                            memory, options.sequence_parallel);
  } else if (options.zero_stage >= 2) {
    grad_shard_ = Tensor::zeros({layout_.shard_size(rank_)}, DType::F32, MemoryTag::Grads, memory);
  }
  reducer_ = std::make_unique<GradientReducer>(params, units, layout_, rank_, comm, memory, options.zero_stage,
                                               options.bucket_bytes / 4,
                                               grad_shard_.defined() ? grad_shard_.data<float>() : nullptr, ownership,
                                               domain_ids_, offloaded_grads_.get());
  transforms.add(reduction_slot(options.group), *reducer_);
  compressor_ = make_compressor(options.compression, reducer_->bucket_shapes(), memory, rank_);
  reducer_->set_compressor(compressor_.get(), options.compression.warmup_steps);
  reducer_->set_message_dtype(options.message_dtype);
}

DataParallel::~DataParallel() {
  transforms_.remove(reduction_slot(options_.group));
  ownership_.release(*reducer_);
  ownership_.release(*this);
  if (gatherer_) {
    transforms_.remove(placement_slot(options_.group));
    ownership_.release(*gatherer_);
  }
}

uint32_t DataParallel::over_this_group() const {
  // The shards of one parameter are spread over this group: its norm sums over it.
  return 1u << static_cast<int>(options_.group);
}

void DataParallel::set_reducing(bool reducing) { reducer_->set_reducing(reducing); }

bool DataParallel::compressed_non_finite() const { return reducer_->compressed_non_finite(); }

std::vector<nn::ParamRange> DataParallel::owned() const {
  return options_.zero_stage == 0 ? layout_.pieces() : layout_.shards(rank_);
}

size_t DataParallel::comm_bound_bytes() const {
  return reducer_->storage_bound_bytes() + (gatherer_ ? gatherer_->gathered_bound_bytes() : 0);
}

float* DataParallel::values_of(nn::ParamRange part) {
  if (gatherer_) {
    float* shard = gatherer_->shard();
    return shard != nullptr ? shard + layout_.shard_offset(rank_, part.begin) : nullptr;
  }
  return params_.flat_values().data<float>() + part.begin;
}

float* DataParallel::grads_of(nn::ParamRange part) {
  if (offloaded_grads_) return nullptr;
  if (grad_shard_.defined()) return grad_shard_.data<float>() + layout_.shard_offset(rank_, part.begin);
  return params_.flat_grads().data<float>() + part.begin;
}

void DataParallel::zero_grads() {
  if (offloaded_grads_) {
    offloaded_grads_->begin_step();
  } else if (grad_shard_.defined()) {
    grad_shard_.fill_zero();
  } else {
    params_.zero_grads();
  }
}

std::vector<optim::Segment> DataParallel::master_segments(std::span<const nn::Parameter* const> params) {
  TS_CHECK(params.size() == domain_ids_.size(), "ZeRO shards its whole domain: it must own the master copy of every "
           "parameter in it ({}), not {}", domain_ids_.size(), params.size());
  std::vector<optim::Segment> out;
  for (const nn::ParamRange& part : owned()) {
    // Offloaded values and gradients (null) live in the nvme tier: offloaded_values(),
    // offloaded_gradients().
    for (optim::Segment& s : optim::segments_of_range(params_, part, values_of(part), grads_of(part),
                                                      over_this_group())) {
      out.push_back(s);
    }
  }
  return out;
}

void DataParallel::after_optimizer_step() {
  if (options_.zero_stage == 1 || options_.zero_stage == 2) {
    if (comm_ != nullptr && comm_->size() > 1) {
      // In place, piece by piece: each rank's updated part is already where it belongs.
      float* values = params_.flat_values().data<float>();
      std::vector<dist::WorkPtr> works;
      for (const nn::ParamRange& piece : layout_.pieces()) {
        const nn::ParamRange mine = layout_.part(piece, rank_);
        works.push_back(comm_->all_gather(values + mine.begin, values + piece.begin, layout_.counts(piece), DType::F32));
      }
      dist::wait_all(works);
    }
  }
}

DataParallel::FullParameters DataParallel::full_parameters() {
  if (!gatherer_) return FullParameters(params_, std::nullopt);
  return FullParameters(params_, gatherer_->gather_all());
}

void DataParallel::gather_into(FullParameters& full) {
  if (gatherer_) full.add(*gatherer_);
}

DataParallel::ReadOnlyParameters DataParallel::read_only_parameters(ReadOrder order) {
  if (gatherer_ && gatherer_->streams()) {
    // With several ranks each parameter is spread over their shards and reading it is an
    // all-gather, which every rank posts for the same parameter in the same order: a save asks for
    // each once in store order on every rank. A sample asks for every parameter once per token;
    // the whole buffer is gathered once for it instead.
    const bool together = gatherer_->gathers_each_read();
    if (!together || order == ReadOrder::EachOnceInStoreOrder) {
      return ReadOnlyParameters(gatherer_->read_one_at_a_time(), together);
    }
  }
  return ReadOnlyParameters(full_parameters());
}

DataParallel::WritableParameters DataParallel::writable_parameters() {
  // Every rank loads every parameter and writes its part into its shard in the nvme tier. In
  // compute memory the whole buffer is gathered and each rank keeps its part (finish()).
  if (gatherer_ && gatherer_->streams()) return WritableParameters(gatherer_->write_one_at_a_time());
  return WritableParameters(full_parameters());
}

Tensor DataParallel::WritableParameters::take(const nn::Parameter& p) {
  return streamed_ ? streamed_->take(p) : full_->weight(p);
}

void DataParallel::WritableParameters::put(const nn::Parameter& p) {
  // A view of the values keeps what was written into it already.
  if (streamed_) streamed_->put(p);
}

void DataParallel::WritableParameters::finish() {
  if (full_) full_->write_back();
}

Tensor DataParallel::WritableParameters::weight(const nn::Parameter& p) {
  TS_CHECK(full_.has_value(), "parameter '{}' asked for while the model is loaded one parameter at a time into the "
           "nvme tier, where no buffer holds it: write it with take() and put()", p.name);
  return full_->weight(p);
}

Tensor DataParallel::WritableParameters::grad(const nn::Parameter& p) {
  TS_FAIL("the parameters written by a load have no gradient ('{}')", p.name);
}

Tensor DataParallel::ReadOnlyParameters::grad(const nn::Parameter& p) {
  TS_FAIL("the parameters read for a checkpoint or a sample have no gradient ('{}'): they are for reading the model",
          p.name);
}

}  // namespace tessera::parallel
