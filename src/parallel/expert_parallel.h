#pragma once
// Expert parallelism (GShard, DeepSpeed-MoE), applied to a model that contains no parallel code:
//
//   - ExpertParallelPlan (sharding rules): the stacked expert weights of every MoE layer
//     ([E, F, C], nn/moe.h) are split along dimension 0 over the ep group, so rank r holds experts
//     [r·E/ep, (r+1)·E/ep); everything else follows the inner rules (the tensor-parallel plan).
//     Experts are not split over tp: they sit outside the tensor-parallel region.
//   - ExpertParallelExchange (nn::ExpertExchange): the MoE layers' dispatch and combine as
//     all-to-alls over the ep group with per-rank counts, the rows of each token choice kept.
//   - ExpertParallel (the chain's expert-parallel slot, exec/transform.h): installs the exchange
//     in the step context of every unit action, which is how the MoE layers reach it.
//   - The gradients: the expert parameters are reduced over the edp group (the ranks holding the
//     same experts, dp / ep of them), the dense ones over dp (parallel/training_engine.cpp makes
//     the two DataParallel domains); ZeRO 1–2 shard each over its own group.
//
// ep is carved out of dp (config/parallel_layout.h): an ep group is ep consecutive data-parallel
// ranks, each with its own microbatches, which route their tokens to each other's experts.
#include <optional>
#include <string>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "exec/transform.h"
#include "nn/expert_exchange.h"
#include "nn/parameters.h"

namespace tessera::parallel {

class ExpertParallelPlan final : public nn::ShardingRules {
 public:
  // `inner` (kept, may be null) splits the parameters that are not experts.
  ExpertParallelPlan(const config::ModelConfig& model, int ep, int rank, const nn::ShardingRules* inner = nullptr);
  std::optional<nn::ShardSpec> spec_for(const std::string& name, const Shape& shape, nn::ParameterRole role,
                                        nn::ParameterPart part) const override;
  // "expert parallel: 8 experts over 2 ranks, experts 0-3 on this rank"
  std::string describe() const;

 private:
  config::ModelConfig model_;
  int ep_, rank_;
  const nn::ShardingRules* inner_;
};

class ExpertParallelExchange final : public nn::ExpertExchange {
 public:
  explicit ExpertParallelExchange(dist::Communicator& ep) : group_(ep) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void exchange_counts(std::span<const int32_t> send, std::span<int32_t> recv) override;
  void exchange_rows(const Tensor& send, std::span<const int64_t> send_rows, const Tensor& recv,
                     std::span<const int64_t> recv_rows) override;

 private:
  dist::Communicator& group_;
};

// Expert parallelism in the transform chain: every unit action exchanges its MoE layers' tokens
// over `ep` (kept by reference).
class ExpertParallel final : public exec::Transform {
 public:
  explicit ExpertParallel(dist::Communicator& ep) : exchange_(ep) {}
  std::string_view name() const override { return "expert parallel"; }
  void before(const exec::Event& event) override {
    if (event.step != nullptr) event.step->experts = &exchange_;
  }

 private:
  ExpertParallelExchange exchange_;
};

}  // namespace tessera::parallel
